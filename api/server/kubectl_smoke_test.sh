#!/bin/bash
# End-to-end smoke test of the REST server with the real kubectl: starts
# knap_api_dev_server (SqliteStore in memory + ApiServer, no controllers) on a
# free port and drives the flows of KUBECTL-WIRE.md. Exit 77 (meson: skipped)
# when kubectl is not installed.
#
#   api/server/kubectl_smoke_test.sh build/api/server/knap_api_dev_server
set -u
SERVER_BIN=${1:?usage: kubectl_smoke_test.sh PATH/TO/knap_api_dev_server}
command -v kubectl >/dev/null 2>&1 || { echo "kubectl not installed: skipping"; exit 77; }

WORK=$(mktemp -d /tmp/knap-kubectl-smoke.XXXXXX)
export HOME=$WORK/home  # private discovery cache
mkdir -p "$HOME"
KCFG=$WORK/kubeconfig
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$SERVER_BIN" --port "$PORT" --kubeconfig "$KCFG" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
WATCH_PID=""
cleanup() {
  [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null
  kill "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 50); do [ -s "$KCFG" ] && break; sleep 0.1; done

K="kubectl --kubeconfig $KCFG"
FAILS=0
# expect NAME EXPECTED_RC GREP_PATTERN -- command...
expect() {
  local name=$1 want_rc=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $want_rc), output:"
    echo "$out" | sed 's/^/    /'
    FAILS=$((FAILS + 1))
  else
    echo "ok   $name"
  fi
}

cat >"$WORK/hello.yaml" <<'EOF'
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
spec:
  template:
    spec:
      containers:
        - image: ghcr.io/knative/helloworld-go:latest
          env:
            - name: TARGET
              value: "World"
EOF
sed 's/World/Knap/' "$WORK/hello.yaml" >"$WORK/hello2.yaml"
sed 's/name: hello/name: ssa/' "$WORK/hello.yaml" >"$WORK/ssa.yaml"
cat >"$WORK/bad.yaml" <<'EOF'
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: bad
spec:
  foo: 1
  template:
    spec:
      containers:
        - image: x
EOF

expect version 0 'Server Version: v1.30.0-knap' -- $K version
expect api-resources 0 'services +kservice,ksvc +serving.knative.dev/v1 +true +Service' -- $K api-resources
expect empty-get 0 'No resources found in default namespace' -- $K get ksvc
expect apply-create 0 'service.serving.knative.dev/hello created' -- $K apply -f "$WORK/hello.yaml"
expect apply-update 0 'service.serving.knative.dev/hello configured' -- $K apply -f "$WORK/hello2.yaml"
expect get-table 0 'NAME +URL +LATESTCREATED +LATESTREADY +READY +REASON' -- $K get ksvc
expect get-yaml 0 'value: Knap' -- $K get ksvc hello -o yaml
expect get-all 0 'service.serving.knative.dev/hello' -- $K get all
expect explain-deep 0 'FIELD: containers' -- $K explain ksvc.spec.template.spec.containers
expect explain-leaf 0 'FIELD: image' -- $K explain ksvc.spec.template.spec.containers.image
expect get-events 0 'No resources found in default namespace' -- $K get events
expect cluster-info 0 'Kubernetes control plane.* is running at .*http://127.0.0.1' -- $K cluster-info
expect patch-merge 0 'hello patched$' -- $K patch ksvc hello --type merge -p '{"metadata":{"labels":{"team":"a"}}}'
expect patch-noop 0 'patched \(no change\)' -- $K patch ksvc hello --type merge -p '{"metadata":{"labels":{"team":"a"}}}'
expect patch-json 0 'hello patched' -- $K patch ksvc hello --type json -p '[{"op":"replace","path":"/metadata/labels/team","value":"b"}]'
expect patch-smp-415 1 'use `kubectl patch --type merge' -- $K patch ksvc hello -p '{"metadata":{"labels":{"team":"c"}}}'
expect label-selector 0 'hello' -- $K get ksvc -l team=b -o name
expect ssa-create 0 'service.serving.knative.dev/ssa serverside-applied' -- $K apply --server-side -f "$WORK/ssa.yaml"
expect chunk-size 0 'service.serving.knative.dev/ssa' -- $K get ksvc --chunk-size=1 -o name
expect ssa-update 0 'service.serving.knative.dev/hello serverside-applied' -- $K apply --server-side --force-conflicts -f "$WORK/hello.yaml"
expect strict-unknown 1 'strict decoding error: unknown field "spec.foo"' -- $K apply -f "$WORK/bad.yaml"
expect warn-unknown 0 'Warning: unknown field "spec.foo"' -- $K apply -f "$WORK/bad.yaml" --validate=warn
expect not-found 1 'services.serving.knative.dev "nope" not found' -- $K get ksvc nope
expect dry-run-delete 0 'deleted \(server dry run\)' -- $K delete ksvc ssa --dry-run=server
expect still-there 0 'ssa' -- $K get ksvc ssa -o name

$K get ksvc -w >"$WORK/watch.out" 2>&1 &
WATCH_PID=$!
sleep 2
expect label-for-watch 0 'labeled' -- $K label ksvc hello watched=yes
expect delete 0 'service.serving.knative.dev "ssa" deleted' -- $K delete ksvc ssa
sleep 1
kill "$WATCH_PID" 2>/dev/null
wait "$WATCH_PID" 2>/dev/null
WATCH_PID=""
rows=$(grep -c '^hello' "$WORK/watch.out")
if [ "$rows" -ge 2 ] && grep -q '^ssa' "$WORK/watch.out"; then
  echo "ok   get-watch"
else
  echo "FAIL get-watch: watch output:"; sed 's/^/    /' "$WORK/watch.out"; FAILS=$((FAILS + 1))
fi
# apply --prune: Knative kinds are not in kubectl's default prune list, so name them.
for n in pa pb; do sed "s/name: hello/name: $n/; s/^metadata:/metadata:\n  labels:\n    app: prune/" "$WORK/hello.yaml" >"$WORK/prune-$n.yaml"; done
expect prune-setup 0 'service.serving.knative.dev/pb created' -- $K apply -f "$WORK/prune-pa.yaml" -f "$WORK/prune-pb.yaml"
expect prune 0 'service.serving.knative.dev/pb pruned' -- $K apply --prune -l app=prune --prune-allowlist=serving.knative.dev/v1/Service -f "$WORK/prune-pa.yaml"
expect pruned-gone 1 '"pb" not found' -- $K get ksvc pb
expect delete-pa 0 '"pa" deleted' -- $K delete ksvc pa --wait=false
expect delete-hello 0 '"hello" deleted' -- $K delete ksvc hello
expect delete-bad 0 '"bad" deleted' -- $K delete ksvc bad --wait=false
expect all-gone 0 'No resources found' -- $K get ksvc

if [ "$FAILS" -ne 0 ]; then
  echo "$FAILS check(s) failed; server log:"
  sed 's/^/    /' "$WORK/server.log"
  exit 1
fi
echo "all kubectl smoke checks passed"
