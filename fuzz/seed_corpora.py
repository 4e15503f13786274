#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target to corpus/<target>/seed-*.

The seeds are what clients send: kubectl's selectors, the objects of the
Kubernetes documentation as JSON, YAML and protobuf, patches as kubectl
patch sends them, and etcd requests as etcdctl encodes them. Protobuf is
encoded here from skiff's own .proto files (apiserver/proto,
store/proto), so no protobuf package is needed. Run from fuzz/; files the
fuzzer added beside the seeds are kept.
"""

import json
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, "seed-" + name), "wb") as f:
        f.write(data)


# --- protobuf, from the .proto files -------------------------------------

def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(number, wire):
    return varint(number << 3 | wire)


def length_delimited(number, payload):
    return key(number, 2) + varint(len(payload)) + payload


SCALARS = {"int32", "int64", "uint32", "uint64", "bool", "string", "bytes",
           "double", "float", "fixed32", "fixed64", "sint32", "sint64"}
FIELD = re.compile(r"^\s*(optional|repeated)?\s*(map<\s*(\w+)\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)")


def load_protos(folder):
    """{full message name: {field: (label, type, number, map value type)}}"""
    messages, enums = {}, set()
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if not name.endswith(".proto"):
                continue
            text = open(os.path.join(dirpath, name)).read()
            package = re.search(r"^package\s+([\w.]+);", text, re.M).group(1)
            stack = []
            for line in text.splitlines():
                line = line.split("//")[0]
                opened = re.match(r"^\s*(message|enum|oneof)\s+(\w+)\s*\{", line)
                if opened:
                    kind, name = opened.groups()
                    if kind == "oneof":
                        stack.append(("oneof", None))
                        continue
                    full = ".".join([package] + [n for k, n in stack if k != "oneof"] + [name])
                    stack.append((kind, name))
                    if kind == "message":
                        messages[full] = {"__package": package}
                    else:
                        enums.add(full)
                    continue
                if re.match(r"^\s*\}", line):
                    if stack:
                        stack.pop()
                    continue
                field = FIELD.match(line)
                if field and stack and stack[-1][0] in ("message", "oneof"):
                    owner = ".".join([package] + [n for k, n in stack if k != "oneof"])
                    label, typ, map_key, map_value, fname, number = field.groups()
                    if map_key:
                        messages[owner][fname] = ("map", map_value, int(number))
                    else:
                        messages[owner][fname] = (label or "optional", typ, int(number))
    return messages, enums


def resolve(messages, enums, scope, typ):
    if typ in SCALARS:
        return typ
    if typ.startswith("."):
        return typ[1:]
    parts = scope.split(".")
    while parts:
        candidate = ".".join(parts + [typ])
        if candidate in messages or candidate in enums:
            return candidate
        parts.pop()
    return typ


def encode(protos, message, value):
    messages, enums = protos
    fields = messages[message]
    out = b""
    for name, field_value in value.items():
        label, typ, number = fields[name]
        if label == "map":
            vtype = resolve(messages, enums, message, typ)
            for k, v in field_value.items():
                entry = length_delimited(1, k.encode()) + scalar_or_message(protos, message, vtype, 2, v)
                out += length_delimited(number, entry)
            continue
        typ = resolve(messages, enums, message, typ)
        items = field_value if label == "repeated" else [field_value]
        for item in items:
            out += scalar_or_message(protos, message, typ, number, item)
    return out


def scalar_or_message(protos, scope, typ, number, value):
    messages, enums = protos
    if typ in ("string", "bytes"):
        return length_delimited(number, value if isinstance(value, bytes) else value.encode())
    if typ == "bool":
        return key(number, 0) + varint(1 if value else 0)
    if typ in ("int32", "int64", "uint32", "uint64") or typ in enums:
        return key(number, 0) + varint(value)
    if typ == "double":
        return key(number, 1) + struct.pack("<d", value)
    if typ in messages:
        return length_delimited(number, encode(protos, typ, value))
    raise ValueError(f"{scope}: no type {typ}")


K8S = load_protos(os.path.join(ROOT, "apiserver", "proto"))
ETCD = load_protos(os.path.join(ROOT, "store", "proto"))


def quantity(text):
    return {"string": text}


# --- objects as clients send them ---------------------------------------

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx", "tier": "web"},
                 "annotations": {"kubernetes.io/description": "the nginx of the docs"}},
    "spec": {
        "containers": [{
            "name": "nginx", "image": "nginx:1.14.2",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                          "limits": {"cpu": "500m", "memory": "128Mi"}},
            "env": [{"name": "GREETING", "value": "hello"}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 80}, "initialDelaySeconds": 3},
            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
        }],
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "restartPolicy": "Always",
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
    },
}

DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "nginx-deployment", "namespace": "default", "labels": {"app": "nginx"}},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "nginx"}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
        "template": {
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2",
                                     "ports": [{"containerPort": 80}]}]},
        },
    },
}

SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "my-service", "namespace": "default"},
    "spec": {"selector": {"app.kubernetes.io/name": "MyApp"}, "type": "NodePort",
             "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 9376}]},
}

CONFIGMAP = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "game-demo", "namespace": "default"},
    "data": {"player_initial_lives": "3", "game.properties": "enemy.types=aliens,monsters\n"},
}

SECRET = {
    "apiVersion": "v1", "kind": "Secret",
    "metadata": {"name": "dotfile-secret", "namespace": "default"},
    "type": "Opaque",
    "data": {".secret-file": "dmFsdWUtMg0KDQo="},
}

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "development", "labels": {"name": "development"}}}

NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
    "spec": {"podCIDR": "10.244.1.0/24", "taints": [{"key": "node-role", "value": "edge", "effect": "NoExecute"}]},
    "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
}

JOB = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "pi", "namespace": "default"},
    "spec": {"backoffLimit": 4, "completions": 3, "parallelism": 2,
             "template": {"spec": {"restartPolicy": "Never",
                                   "containers": [{"name": "pi", "image": "perl:5.34.0",
                                                   "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]}]}}},
}

CRONJOB = {
    "apiVersion": "batch/v1", "kind": "CronJob",
    "metadata": {"name": "hello", "namespace": "default"},
    "spec": {"schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid",
             "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                                                            "containers": [{"name": "hello", "image": "busybox:1.28",
                                                                            "command": ["/bin/sh", "-c", "date"]}]}}}}},
}

STATEFULSET = {
    "apiVersion": "apps/v1", "kind": "StatefulSet",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {"serviceName": "nginx", "replicas": 2, "selector": {"matchLabels": {"app": "nginx"}},
             "template": {"metadata": {"labels": {"app": "nginx"}},
                          "spec": {"containers": [{"name": "nginx", "image": "registry.k8s.io/nginx-slim:0.8"}]}},
             "volumeClaimTemplates": [{"metadata": {"name": "www"},
                                       "spec": {"accessModes": ["ReadWriteOnce"],
                                                "resources": {"requests": {"storage": "1Gi"}}}}]},
}

ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
    "metadata": {"name": "pod-reader", "namespace": "default"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}],
}

NETWORK_POLICY = {
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "test-network-policy", "namespace": "default"},
    "spec": {"podSelector": {"matchLabels": {"role": "db"}}, "policyTypes": ["Ingress"],
             "ingress": [{"from": [{"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                                   {"namespaceSelector": {"matchLabels": {"project": "myproject"}}}],
                          "ports": [{"protocol": "TCP", "port": 6379}]}]},
}

LIMIT_RANGE = {
    "apiVersion": "v1", "kind": "LimitRange",
    "metadata": {"name": "cpu-resource-constraint", "namespace": "default"},
    "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "500m"},
                         "max": {"cpu": "1"}, "min": {"cpu": "100m"}}]},
}

QUOTA = {
    "apiVersion": "v1", "kind": "ResourceQuota",
    "metadata": {"name": "compute-resources", "namespace": "default"},
    "spec": {"hard": {"requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "2", "pods": "4"},
             "scopeSelector": {"matchExpressions": [{"operator": "In", "scopeName": "PriorityClass",
                                                     "values": ["high"]}]}},
}

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "crontabs.stable.example.com"},
    "spec": {"group": "stable.example.com", "scope": "Namespaced",
             "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "shortNames": ["ct"]},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {
                                   "cronSpec": {"type": "string"}, "image": {"type": "string"},
                                   "replicas": {"type": "integer"}}}}}}}]},
}

HPA_V1 = {
    "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "php-apache", "namespace": "default"},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "php-apache"},
             "minReplicas": 1, "maxReplicas": 10, "targetCPUUtilizationPercentage": 50},
}

PERSISTENT_VOLUME = {
    "apiVersion": "v1", "kind": "PersistentVolume",
    "metadata": {"name": "pv0003"},
    "spec": {"capacity": {"storage": "5Gi"}, "volumeMode": "Filesystem", "accessModes": ["ReadWriteOnce"],
             "persistentVolumeReclaimPolicy": "Recycle", "storageClassName": "slow",
             "mountOptions": ["hard", "nfsvers=4.1"], "nfs": {"path": "/tmp", "server": "172.17.0.2"}},
}

CLAIM = {
    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
    "metadata": {"name": "myclaim", "namespace": "default"},
    "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
             "resources": {"requests": {"storage": "8Gi"}}, "storageClassName": "slow",
             "selector": {"matchLabels": {"release": "stable"},
                          "matchExpressions": [{"key": "environment", "operator": "In", "values": ["dev"]}]}},
}

OBJECTS = {
    "pod": POD, "deployment": DEPLOYMENT, "service": SERVICE, "configmap": CONFIGMAP,
    "secret": SECRET, "namespace": NAMESPACE, "node": NODE, "job": JOB, "cronjob": CRONJOB,
    "statefulset": STATEFULSET, "role": ROLE, "networkpolicy": NETWORK_POLICY,
    "limitrange": LIMIT_RANGE, "resourcequota": QUOTA, "crd": CRD, "hpa-v1": HPA_V1,
    "persistentvolume": PERSISTENT_VOLUME, "persistentvolumeclaim": CLAIM,
}


def to_yaml(value, indent=0):
    """Block YAML, enough for these objects (strings always quoted)."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{json.dumps(k)}:\n{to_yaml(v, indent + 1)}")
            else:
                lines.append(f"{pad}{json.dumps(k)}: {to_yaml(v, 0)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return "[]"
        lines = []
        for item in value:
            body = to_yaml(item, indent + 1)
            lines.append(f"{pad}- {body.lstrip()}")
        return "\n".join(lines)
    return json.dumps(value)


# --- protobuf bodies ------------------------------------------------------

PROTO_KINDS = {
    "Pod": "k8s.io.api.core.v1.Pod", "ConfigMap": "k8s.io.api.core.v1.ConfigMap",
    "Secret": "k8s.io.api.core.v1.Secret", "Service": "k8s.io.api.core.v1.Service",
    "Namespace": "k8s.io.api.core.v1.Namespace", "Deployment": "k8s.io.api.apps.v1.Deployment",
    "Role": "k8s.io.api.rbac.v1.Role", "Job": "k8s.io.api.batch.v1.Job",
}


def protobuf_form(value, message):
    """JSON values as the .proto types want them: quantities and
    int-or-strings are messages, secret data is bytes."""
    messages, enums = K8S
    fields = messages[message]
    out = {}
    for name, v in value.items():
        if name in ("apiVersion", "kind"):
            continue
        if name not in fields:
            # An embedded struct (Probe's handler): its fields are inline in JSON.
            inline = next(f for f, spec in fields.items() if not f.startswith("__")
                          and name in messages.get(resolve(messages, enums, message, spec[1]), {}))
            out.setdefault(inline, {}).update(
                protobuf_form({name: v}, resolve(messages, enums, message, fields[inline][1])))
            continue
        label, typ, number = fields[name]
        typ = resolve(messages, enums, message, typ)
        if label == "map":
            if typ.endswith("resource.Quantity"):
                v = {k: quantity(q) for k, q in v.items()}
            elif typ == "bytes":
                import base64
                v = {k: base64.b64decode(b) for k, b in v.items()}
            out[name] = v
        elif typ.endswith("intstr.IntOrString"):
            out[name] = {"type": 1, "strVal": v} if isinstance(v, str) else {"type": 0, "intVal": v}
        elif typ in messages:
            if label == "repeated":
                out[name] = [protobuf_form(item, typ) for item in v]
            else:
                out[name] = protobuf_form(v, typ)
        else:
            out[name] = v
    return out


def k8s_body(obj):
    message = PROTO_KINDS[obj["kind"]]
    raw = encode(K8S, message, protobuf_form(obj, message))
    unknown = encode(K8S, "k8s.io.apimachinery.pkg.runtime.Unknown", {
        "typeMeta": {"apiVersion": obj["apiVersion"], "kind": obj["kind"]},
        "raw": raw,
    })
    return b"k8s\0" + unknown


# --- the seeds ------------------------------------------------------------

def label_selectors():
    for i, text in enumerate([
        "app=nginx", "environment in (production, qa)", "tier notin (frontend,backend)",
        "!canary", "partition", "environment=production,tier!=frontend", "release==stable",
        "app.kubernetes.io/name=skiff,app.kubernetes.io/component!=db", "k8s-app=kube-dns",
        "version>3", "replicas<10", "a in ()", "a in (,x,)", "suite=errors", "x=y,!z,w in (1,2,3)",
        "example.com/team notin (a-b, c_d, e.f)", "",
    ]):
        write("label_selector", f"{i:02}", text)


def field_selectors():
    for i, text in enumerate([
        "metadata.name=web-0", "spec.nodeName=node-1", "status.phase!=Running,spec.restartPolicy=Always",
        "involvedObject.kind=Pod,involvedObject.name=web-0", "type=kubernetes.io/service-account-token",
        "metadata.namespace==default", "metadata.name=a\\,b\\=c\\\\", "spec.hostNetwork=true",
        "status.podIP=10.0.0.7", "metadata.name===", "\u00e9=x", "spec.schedulerName=default-scheduler,",
    ]):
        write("field_selector", f"{i:02}", text)


def quantities():
    for i, text in enumerate([
        "500m", "1Gi", "1.5Gi", "2", "1e3", "100Mi", "0.5", "128974848", "129e6", "129M", "123Mi",
        "1Ki|512", "-1", "+.5", "1E-3", "1n", "2E", "1e400|1e400", "170141183460469231731687303715884105727m",
        " 250m ", "0.000000001", "1Ei|1Ei", "10Gi|-3Gi",
    ]):
        write("quantity", f"{i:02}", text)


def request_bodies():
    # byte 0: content type (low 3 bits: 0 json, 2 yaml, 3 protobuf) and
    # fieldValidation (>> 3: 0 Strict, 1 Warn, 2 Ignore); byte 1 picks a
    # resource for a body that names none.
    for name, obj in OBJECTS.items():
        write("request_body", f"{name}.json", bytes([0x00, 0]) + json.dumps(obj).encode())
        write("request_body", f"{name}.yaml", bytes([0x0A, 0]) + to_yaml(obj).encode())
        if obj["kind"] in PROTO_KINDS:
            write("request_body", f"{name}.pb", bytes([0x03, 0]) + k8s_body(obj))
            write("protobuf_body", f"{name}", k8s_body(obj))
    bad = dict(POD, spec=dict(POD["spec"], bogus=1))
    write("request_body", "pod-unknown-field.json", bytes([0x00, 0]) + json.dumps(bad).encode())
    write("request_body", "duplicate-field.json", bytes([0x08, 0]) +
          b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"b"},"data":{"k":"v"}}')


def patches():
    current = lambda obj: json.dumps(obj).encode() + b"\0"
    json_patches = {
        "replicas": (DEPLOYMENT, [{"op": "replace", "path": "/spec/replicas", "value": 5}]),
        "add-label": (POD, [{"op": "add", "path": "/metadata/labels/env", "value": "prod"}]),
        "test-remove": (POD, [{"op": "test", "path": "/spec/restartPolicy", "value": "Always"},
                             {"op": "remove", "path": "/spec/tolerations/0"}]),
        "move-copy": (CONFIGMAP, [{"op": "copy", "from": "/data/player_initial_lives", "path": "/data/lives"},
                                  {"op": "move", "from": "/data/lives", "path": "/data/x~1y"}]),
        "append": (DEPLOYMENT, [{"op": "add", "path": "/spec/template/spec/containers/-",
                                 "value": {"name": "redis", "image": "redis"}}]),
    }
    for name, (obj, patch) in json_patches.items():
        write("json_patch", name, b"\0" + current(obj) + json.dumps(patch).encode())
    merge_patches = {
        "replicas": (DEPLOYMENT, {"spec": {"replicas": 2}}),
        "remove-label": (POD, {"metadata": {"labels": {"tier": None}}}),
        "data": (CONFIGMAP, {"data": {"player_initial_lives": "5", "new": "x"}}),
        "replace-list": (SERVICE, {"spec": {"ports": [{"port": 8080, "targetPort": 80}]}}),
    }
    for name, (obj, patch) in merge_patches.items():
        write("merge_patch", name, b"\0" + current(obj) + json.dumps(patch).encode())
    strategic = {
        "add-container": (DEPLOYMENT, {"spec": {"template": {"spec": {"containers": [
            {"name": "patch-demo-ctr-2", "image": "redis"}]}}}}),
        "delete-container": (DEPLOYMENT, {"spec": {"template": {"spec": {"containers": [
            {"name": "nginx", "$patch": "delete"}]}}}}),
        "replace-tolerations": (POD, {"spec": {"tolerations": [{"effect": "NoSchedule", "key": "disktype",
                                                                 "value": "ssd"}]}}),
        "retain-keys": (DEPLOYMENT, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        "set-element-order": (POD, {"spec": {"$setElementOrder/containers": [{"name": "nginx"}],
                                             "containers": [{"name": "nginx", "image": "nginx:1.25"}]}}),
        "delete-from-primitive-list": (POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        "ports-by-container-port": (POD, {"spec": {"containers": [{"name": "nginx", "ports": [
            {"containerPort": 443, "protocol": "TCP"}]}]}}),
    }
    for name, (obj, patch) in strategic.items():
        write("strategic_merge_patch", name, b"\0" + current(obj) + json.dumps(patch).encode())


def applies():
    # byte 0 picks a resource for a configuration that names none; byte 1: force.
    config = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "nginx-deployment", "namespace": "default"},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nginx"}},
                       "template": {"metadata": {"labels": {"app": "nginx"}},
                                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}}}
    write("apply_yaml", "deployment-create.yaml", b"\0\0" + to_yaml(config).encode())
    write("apply_yaml", "deployment-over-live.json", b"\0\0" + json.dumps(DEPLOYMENT).encode() + b"\0" +
          json.dumps(config).encode())
    write("apply_yaml", "deployment-force.yaml", b"\0\1" + json.dumps(DEPLOYMENT).encode() + b"\0" +
          to_yaml(config).encode())
    for name in ("pod", "service", "configmap", "cronjob", "networkpolicy", "hpa-v1", "crd"):
        write("apply_yaml", f"{name}.yaml", b"\0\0" + to_yaml(OBJECTS[name]).encode())
    write("apply_yaml", "configmap-anchors.yaml", b"\0\0" + b"""apiVersion: v1
kind: ConfigMap
metadata: &meta
  name: anchored
  namespace: default
data:
  a: &value "x"
  b: *value
""")


def etcd_message(name, value):
    return encode(ETCD, "etcdserverpb." + name, value)


def frame(rpc, message):
    return bytes([rpc]) + struct.pack(">H", len(message)) + message


RANGE, PUT, DELETE, TXN, COMPACT, GRANT, REVOKE, WATCH = range(8)


def etcd_requests():
    put = lambda k, v, **extra: frame(PUT, etcd_message("PutRequest", dict(key=k.encode(), value=v.encode(), **extra)))
    rng = lambda **f: frame(RANGE, etcd_message("RangeRequest", f))
    txn_value = {
        "compare": [{"result": 0, "target": 1, "key": b"/registry/pods/default/web-0", "create_revision": 0}],
        "success": [{"request_put": {"key": b"/registry/pods/default/web-0", "value": b"{}"}}],
        "failure": [{"request_range": {"key": b"/registry/pods/default/web-0"}}],
    }
    nested = {"success": [{"request_txn": txn_value}, {"request_delete_range": {"key": b"/a", "range_end": b"/b"}}],
              "compare": [{"result": 3, "target": 4, "key": b"k", "value": b"v", "range_end": b"l"}]}
    seeds = {
        "put-get": put("foo", "bar") + rng(key=b"foo"),
        "prefix": put("/registry/pods/a", "1") + put("/registry/pods/b", "2") +
                  rng(key=b"/registry/pods/", range_end=b"/registry/pods0", limit=1, sort_order=2, sort_target=3),
        "txn-create": frame(TXN, etcd_message("TxnRequest", txn_value)) * 2,
        "txn-nested": put("k", "v") + frame(TXN, etcd_message("TxnRequest", nested)),
        "delete-prefix": put("a", "1") + put("ab", "2") +
                         frame(DELETE, etcd_message("DeleteRangeRequest", {"key": b"a", "range_end": b"b", "prev_kv": True})),
        "compact": put("k", "1") + put("k", "2") + put("k", "3") +
                   frame(COMPACT, etcd_message("CompactionRequest", {"revision": 2, "physical": True})) +
                   rng(key=b"k", revision=1) + rng(key=b"k", revision=3),
        "lease": frame(GRANT, etcd_message("LeaseGrantRequest", {"TTL": 60, "ID": 7})) +
                 put("leased", "v", lease=7) + frame(REVOKE, etcd_message("LeaseRevokeRequest", {"ID": 7})) +
                 rng(key=b"leased"),
        "watch-history": put("w/a", "1") + put("w/b", "2") +
                         frame(WATCH, etcd_message("WatchRequest", {"create_request": {
                             "key": b"w/", "range_end": b"w0", "start_revision": 1, "prev_kv": True}})) +
                         frame(DELETE, etcd_message("DeleteRangeRequest", {"key": b"w/a"})),
        "watch-filters": frame(WATCH, etcd_message("WatchRequest", {"create_request": {
                             "key": b"\0", "range_end": b"\0", "filters": [0], "watch_id": 5}})) +
                         put("x", "1") + frame(DELETE, etcd_message("DeleteRangeRequest", {"key": b"x"})),
        "ignore-value": put("k", "1") + frame(PUT, etcd_message("PutRequest", {"key": b"k", "ignore_value": True})),
        "range-revisions": put("a", "1") + put("b", "2") + rng(key=b"\0", range_end=b"\0", min_mod_revision=2,
                                                               count_only=True) +
                           rng(key=b"a", range_end=b"c", keys_only=True, max_create_revision=1, serializable=True),
    }
    for name, data in seeds.items():
        write("etcd_requests", name, data)
    write("etcd_txn_decode", "create", etcd_message("TxnRequest", txn_value))
    write("etcd_txn_decode", "nested", etcd_message("TxnRequest", nested))
    write("etcd_txn_decode", "empty-op", etcd_message("TxnRequest", {"success": [{}]}))


if __name__ == "__main__":
    label_selectors()
    field_selectors()
    quantities()
    request_bodies()
    patches()
    applies()
    etcd_requests()
