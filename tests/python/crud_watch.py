"""The Python `kubernetes` client against skiff, as tests/tests/python_client.rs
runs it: `crud_watch.py KUBECONFIG NAMESPACE`. Creates a ConfigMap and pods,
lists with a label selector, and watches pods with watch.Watch().stream while
a thread creates, replaces and deletes one. Prints one JSON object with what
it saw; the Rust test checks the values."""

import json
import sys
import threading
import time

from kubernetes import client, config, watch

WATCH_SECONDS = 15


def pod(name, labels):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main", image="busybox:1.36")]
        ),
    )


def main():
    kubeconfig, namespace = sys.argv[1], sys.argv[2]
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()
    seen = {}

    cm = v1.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="py-settings", labels={"app": "py"}),
            data={"mode": "fast"},
        ),
    )
    seen["configmap"] = {
        "name": cm.metadata.name,
        "namespace": cm.metadata.namespace,
        "uid": cm.metadata.uid,
        "resourceVersion": cm.metadata.resource_version,
        "data": cm.data,
    }
    seen["configmap_read"] = v1.read_namespaced_config_map("py-settings", namespace).data

    for name, app in [("py-a", "py"), ("py-b", "py"), ("py-other", "other")]:
        v1.create_namespaced_pod(namespace, pod(name, {"app": app}))
    listed = v1.list_namespaced_pod(namespace, label_selector="app=py")
    seen["listed"] = sorted(p.metadata.name for p in listed.items)
    seen["listed_not"] = sorted(
        p.metadata.name
        for p in v1.list_namespaced_pod(namespace, label_selector="app!=py").items
    )
    seen["listed_cm"] = [
        c.metadata.name
        for c in v1.list_namespaced_config_map(namespace, label_selector="app in (py)").items
    ]
    since = listed.metadata.resource_version
    seen["list_resource_version"] = since

    changes = []
    failures = []

    def change_pods():
        try:
            time.sleep(0.5)
            created = v1.create_namespaced_pod(namespace, pod("py-w", {"app": "py-watch"}))
            changes.append(["ADDED", "py-w", created.metadata.resource_version])
            created.metadata.labels["step"] = "two"
            replaced = v1.replace_namespaced_pod("py-w", namespace, created)
            changes.append(["MODIFIED", "py-w", replaced.metadata.resource_version])
            deleted = v1.delete_namespaced_pod("py-w", namespace)
            changes.append(["DELETED", "py-w", deleted.metadata.resource_version])
        except Exception as err:  # reported, and the watch times out
            failures.append(repr(err))

    events = []
    w = watch.Watch()
    changer = threading.Thread(target=change_pods)
    changer.start()
    for event in w.stream(
        v1.list_namespaced_pod,
        namespace,
        label_selector="app=py-watch",
        resource_version=since,
        timeout_seconds=WATCH_SECONDS,
    ):
        obj = event["object"]
        events.append(
            [
                event["type"],
                obj.metadata.name,
                obj.metadata.resource_version,
                (obj.metadata.labels or {}).get("step"),
            ]
        )
        if event["type"] == "DELETED":
            w.stop()
    changer.join()
    seen["events"] = events
    seen["changes"] = changes
    seen["failures"] = failures
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
