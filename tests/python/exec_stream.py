"""The Python `kubernetes` client's exec stream against skiff, as
tests/tests/pod_exec.rs runs it: `exec_stream.py KUBECONFIG NAMESPACE POD`.
Runs commands in the pod through `stream(connect_get_namespaced_pod_exec)`
(WebSocket, `v4.channel.k8s.io`): output only, stdout and stderr apart with
the exit code, and stdin. Prints one JSON object with what it saw; the Rust
test checks the values."""

import json
import sys

from kubernetes import client, config
from kubernetes.stream import stream


def main():
    kubeconfig, namespace, pod = sys.argv[1], sys.argv[2], sys.argv[3]
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()
    seen = {}
    seen["echo"] = stream(
        v1.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=["echo", "hello from python"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )

    resp = stream(
        v1.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=["sh", "-c", "echo out; echo err >&2; exit 3"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=20)
    seen["stdout"] = resp.read_stdout()
    seen["stderr"] = resp.read_stderr()
    seen["returncode"] = resp.returncode
    resp.close()

    # head ends after six bytes, so no stdin close is needed.
    resp = stream(
        v1.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=["head", "-c", "6"],
        stderr=True,
        stdin=True,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.write_stdin("hello\n")
    resp.run_forever(timeout=20)
    seen["stdin_echo"] = resp.read_stdout()
    seen["stdin_returncode"] = resp.returncode
    resp.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
