#!/usr/bin/env python3
"""Writes apiserver/proto/ from Kubernetes' sources at one release.

Usage: generate.py SRC OUT, where SRC holds k8s.io/api, k8s.io/apimachinery
and k8s.io/apiextensions-apiserver checked out at the same release (the
`v0.33.x` tags, matching the k8s-openapi feature the types are built with).

Two things are written, both facts about the wire and nothing else:
- each `generated.proto` the served groups need, with comments removed:
  message names, field names, numbers and types;
- `fields.tsv`: for each Go struct field that has a protobuf tag, how its
  JSON differs from its protobuf field (see apiserver/src/protobuf/fields.rs).
"""
import os
import re
import sys

GROUPS = [
    "k8s.io/apimachinery/pkg/apis/meta/v1",
    "k8s.io/apimachinery/pkg/runtime",
    "k8s.io/apimachinery/pkg/runtime/schema",
    "k8s.io/apimachinery/pkg/api/resource",
    "k8s.io/apimachinery/pkg/util/intstr",
    "k8s.io/api/core/v1",
    "k8s.io/api/apps/v1",
    "k8s.io/api/batch/v1",
    "k8s.io/api/batch/v1beta1",
    "k8s.io/api/coordination/v1",
    "k8s.io/api/policy/v1",
    "k8s.io/api/rbac/v1",
    "k8s.io/api/admissionregistration/v1",
    "k8s.io/api/discovery/v1",
    "k8s.io/api/storage/v1",
    "k8s.io/api/scheduling/v1",
    "k8s.io/api/scheduling/v1beta1",
    "k8s.io/api/authentication/v1",
    "k8s.io/api/authorization/v1",
    "k8s.io/api/autoscaling/v1",
    "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
]

STRUCT = re.compile(r"^type (\w+) struct \{")
FIELD = re.compile(r"^\s+([^`]+?)\s+`([^`]*)`")
TAG = re.compile(r'(\w+):"([^"]*)"')


def strip(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = []
    for line in text.splitlines():
        line = re.sub(r"//.*$", "", line).rstrip()
        if not line or line.startswith("option go_package"):
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def go_fields(directory, package):
    rows = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("zz_"):
            continue
        struct = None
        for line in open(os.path.join(directory, name), encoding="utf-8"):
            match = STRUCT.match(line)
            if match:
                struct = match.group(1)
                continue
            if line.startswith("}"):
                struct = None
                continue
            if struct is None:
                continue
            match = FIELD.match(line)
            if not match:
                continue
            tags = dict(TAG.findall(match.group(2)))
            if "protobuf" not in tags or "json" not in tags:
                continue
            proto = dict(p.split("=", 1) for p in tags["protobuf"].split(",") if "=" in p)
            words = match.group(1).split()
            gotype = words[-1]
            json_name, *options = tags["json"].split(",")
            proto_name = proto.get("name", "")
            number = tags["protobuf"].split(",")[1]
            flags = ""
            if "inline" in options:
                flags += "i"
            if gotype.startswith("*"):
                flags += "p"
            if "omitempty" in options:
                flags += "o"
            if gotype.startswith("[]") or gotype.startswith("map["):
                flags += "c"
            # Only the fields whose JSON is not simply "the protobuf field
            # under the same name, present when set on the wire".
            renamed = json_name != proto_name
            omit_zero = "o" in flags and "p" not in flags and "c" not in flags
            if "i" in flags or renamed or omit_zero:
                rows.append((f"{package}.{struct}", number, json_name or "-", flags))
    return rows


def main():
    src, out = sys.argv[1], sys.argv[2]
    rows = []
    for group in GROUPS:
        directory = os.path.join(src, group)
        text = open(os.path.join(directory, "generated.proto"), encoding="utf-8").read()
        package = re.search(r"^package ([\w.]+);", text, flags=re.M).group(1)
        target = os.path.join(out, group, "generated.proto")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(strip(text))
        rows += go_fields(directory, package)
    with open(os.path.join(out, "fields.tsv"), "w", encoding="utf-8") as f:
        f.write("# message\tfield number\tJSON name\tflags (i inline, p pointer, o omitempty, c slice or map)\n")
        for row in rows:
            f.write("\t".join(row) + "\n")


main()
