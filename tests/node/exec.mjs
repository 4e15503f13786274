// The Node `@kubernetes/client-node` client's Exec against skiff, as
// tests/tests/pod_exec.rs runs it: `node exec.mjs KUBECONFIG NAMESPACE POD`
// (with NODE_PATH naming the node_modules the client is in). Runs a
// command that writes to stdout and stderr and exits 3, and one that reads
// stdin; prints one JSON object with what it saw.
import { Writable, Readable } from "node:stream";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, kubeconfig, namespace, pod] = process.argv.slice(2);
const k8s = await import(
  pathToFileURL(join(modules, "@kubernetes/client-node/dist/index.js")).href
);
const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
const exec = new k8s.Exec(kc);

function collector() {
  const chunks = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(Buffer.from(chunk));
      done();
    },
  });
  return { stream, text: () => Buffer.concat(chunks).toString() };
}

function run(command, stdin) {
  return new Promise((resolve, reject) => {
    const out = collector();
    const err = collector();
    let ended = false;
    exec
      .exec(namespace, pod, "main", command, out.stream, err.stream, stdin, false, (status) => {
        ended = true;
        // The socket may still hold output when the status arrives.
        setTimeout(() => resolve({ stdout: out.text(), stderr: err.text(), status }), 200);
      })
      .then((socket) => {
        socket.on("close", (code) => {
          if (!ended) {
            reject(new Error(`${command.join(" ")}: closed (${code}) without a status; ` +
              `stdout ${JSON.stringify(out.text())}, stderr ${JSON.stringify(err.text())}`));
          }
        });
      })
      .catch(reject);
  });
}

const seen = {};
seen.failing = await run(["sh", "-c", "echo out; echo err >&2; exit 3"], null);
seen.stdin = await run(["head", "-c", "6"], Readable.from([Buffer.from("hello\n")]));
console.log(JSON.stringify(seen));
process.exit(0);
