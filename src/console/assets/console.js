// toolgate console: live updates of the approvals inbox, the time left on each approval, and
// a check of edited arguments against the tool's input schema before they are sent, and the
// sign-in's proof in every change. Pages read without it; changes of a signed-in person need
// it (the server checks every answer again). Markup inserted here is the
// server's, already escaped; values are set as text, never parsed as HTML.
"use strict";

// The buttons that change something (answers, Accept, End session) come disabled and wait a moment after they appear (the page loaded, or a
// card arrived) before this enables them, so a click meant for something else, such as the
// second click of a double-click begun on another page that sent the browser here, cannot land
// on Approve.
var HOLD_MS = 1000;
function release(root) {
  var buttons = root.querySelectorAll("button[data-hold]");
  setTimeout(function () {
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].disabled = false;
    }
  }, HOLD_MS);
}
release(document);

// The sign-in's proof: handed over once, by the answer to the sign-in, and kept in this
// origin's storage (a cookie reaches every port of the host; this storage does not), then put
// into each change as it is sent. A page never carries it.
(function () {
  var KEY = "toolgate-console-proof";
  var handoff = document.getElementById("proof");
  if (handoff) {
    try {
      window.localStorage.setItem(KEY, handoff.getAttribute("data-proof"));
    } catch (e) {
      // No storage: changes are refused, and the page says why.
    }
    window.location.replace("/console/");
    return;
  }
  if (document.querySelector("form.login")) {
    try {
      window.localStorage.removeItem(KEY);
    } catch (e) {
      // Nothing kept.
    }
  }
  document.addEventListener("submit", function (event) {
    var field = event.target.querySelector && event.target.querySelector("input[data-proof]");
    if (!field) return;
    var proof = null;
    try {
      proof = window.localStorage.getItem(KEY);
    } catch (e) {
      // Sent without it: refused.
    }
    field.value = proof || "";
  }, true);
})();

(function () {
  var pending = document.getElementById("pending");
  if (!pending) {
    return;
  }
  var decided = document.getElementById("decided");
  var live = document.getElementById("live");
  var empty = document.getElementById("empty");

  function say(text) {
    live.textContent = text;
  }

  function refreshEmpty() {
    empty.hidden = pending.children.length > 0;
  }

  function cardOf(id) {
    var cards = pending.querySelectorAll("li.card");
    for (var i = 0; i < cards.length; i++) {
      if (cards[i].getAttribute("data-approval") === id) {
        return cards[i];
      }
    }
    return null;
  }

  // Time left, counted down each second.
  function tick() {
    var now = Date.now() / 1000;
    var spans = document.querySelectorAll("span.left[data-expires]");
    for (var i = 0; i < spans.length; i++) {
      var left = Math.max(0, Math.round(Number(spans[i].getAttribute("data-expires")) - now));
      spans[i].textContent = left + " s";
    }
  }
  setInterval(tick, 1000);

  // A small JSON Schema check: the keywords tools use most. The server checks the whole schema.
  function typeOf(value) {
    if (value === null) return "null";
    if (Array.isArray(value)) return "array";
    if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
    return typeof value;
  }

  function fits(type, value) {
    var actual = typeOf(value);
    return type === actual || (type === "number" && actual === "integer");
  }

  function check(schema, value, path, problems) {
    if (!schema || typeof schema !== "object") return;
    if (schema.type) {
      var types = Array.isArray(schema.type) ? schema.type : [schema.type];
      if (!types.some(function (t) { return fits(t, value); })) {
        problems.push(path + ": expected " + types.join(" or ") + ", got " + typeOf(value));
        return;
      }
    }
    if (Array.isArray(schema.enum) && !schema.enum.some(function (e) {
      return JSON.stringify(e) === JSON.stringify(value);
    })) {
      problems.push(path + ": not one of " + JSON.stringify(schema.enum));
    }
    if (typeof value === "string") {
      if (typeof schema.minLength === "number" && value.length < schema.minLength) {
        problems.push(path + ": shorter than " + schema.minLength);
      }
      if (typeof schema.maxLength === "number" && value.length > schema.maxLength) {
        problems.push(path + ": longer than " + schema.maxLength);
      }
    }
    if (typeof value === "number") {
      if (typeof schema.minimum === "number" && value < schema.minimum) {
        problems.push(path + ": less than " + schema.minimum);
      }
      if (typeof schema.maximum === "number" && value > schema.maximum) {
        problems.push(path + ": more than " + schema.maximum);
      }
    }
    if (typeOf(value) === "object") {
      var properties = schema.properties || {};
      (schema.required || []).forEach(function (name) {
        if (!Object.prototype.hasOwnProperty.call(value, name)) {
          problems.push(path + ": '" + name + "' is required");
        }
      });
      Object.keys(value).forEach(function (name) {
        if (Object.prototype.hasOwnProperty.call(properties, name)) {
          check(properties[name], value[name], path + "/" + name, problems);
        } else if (schema.additionalProperties === false) {
          problems.push(path + ": '" + name + "' is not allowed");
        }
      });
    }
    if (typeOf(value) === "array" && schema.items && typeof schema.items === "object") {
      value.forEach(function (item, i) {
        check(schema.items, item, path + "/" + i, problems);
      });
    }
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.classList || !form.classList.contains("edit")) return;
    var area = form.querySelector("textarea");
    var error = form.querySelector(".edit-error");
    var problems = [];
    var value;
    try {
      value = JSON.parse(area.value);
      if (typeOf(value) !== "object") {
        problems.push("the arguments must be a JSON object");
      }
    } catch (e) {
      problems.push("the arguments are not JSON: " + e.message);
    }
    var schemaText = area.getAttribute("data-schema");
    if (problems.length === 0 && schemaText) {
      try {
        check(JSON.parse(schemaText), value, "(root)", problems);
      } catch (e) {
        // A schema the page cannot read is left to the server.
      }
    }
    if (problems.length > 0) {
      event.preventDefault();
      error.textContent = problems.join("; ");
      error.hidden = false;
      area.setAttribute("aria-invalid", "true");
      area.focus();
    } else {
      error.hidden = true;
      area.removeAttribute("aria-invalid");
    }
  });

  if (!window.EventSource) return;
  var source = new EventSource("/console/events");
  source.addEventListener("requested", function (event) {
    var holder = document.createElement("template");
    holder.innerHTML = event.data;
    var card = holder.content.firstElementChild;
    if (!card || cardOf(card.getAttribute("data-approval"))) return;
    pending.appendChild(card);
    release(card);
    refreshEmpty();
    tick();
    say("A new approval is waiting.");
  });
  source.addEventListener("ended", function (event) {
    var ended = JSON.parse(event.data);
    var card = cardOf(ended.id);
    if (card) {
      card.remove();
      refreshEmpty();
      say("An approval left the list: " + ended.how + (ended.by ? " by " + ended.by : "") + ".");
    }
    var holder = document.createElement("template");
    holder.innerHTML = ended.html;
    if (holder.content.firstElementChild) {
      decided.insertBefore(holder.content.firstElementChild, decided.firstChild);
      // The last 50: a flood of decisions does not grow the page without end.
      while (decided.children.length > 50) {
        decided.removeChild(decided.lastChild);
      }
    }
  });
  source.addEventListener("stale", function () {
    window.location.reload();
  });
})();
