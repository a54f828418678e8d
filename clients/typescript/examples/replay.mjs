// Replays a provider's recorded responses, so the agent loops here run without an API key.
//
// `recordedFetch(name)` is a fetch function (what the provider SDKs take as `fetch`) that
// answers each request with the next response of clients/recorded/<name>.json, in order. With
// REPLAY_LOG set, the requests' bodies (what the SDK sent) are written there as a JSON list.

import { readFileSync, writeFileSync } from "node:fs";

const RECORDED = new URL("../../recorded/", import.meta.url);

export function recordedFetch(name) {
  const replies = JSON.parse(readFileSync(new URL(`${name}.json`, RECORDED), "utf8"));
  const sent = [];
  return async (input, init) => {
    const request = new Request(input, init);
    sent.push(JSON.parse(await request.text()));
    if (process.env.REPLAY_LOG) writeFileSync(process.env.REPLAY_LOG, JSON.stringify(sent, null, 1));
    const reply = replies[sent.length - 1];
    if (reply === undefined) {
      return Response.json({ error: { message: "no more recorded replies" } }, { status: 500 });
    }
    return Response.json(reply);
  };
}
