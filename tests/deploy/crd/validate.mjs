// Check Prometheus Operator custom resources against the operator's API schemas, twice:
//  1. the JSON Schema validators of @kubernetes-models/prometheus-operator (generated from the
//     operator's Go API types, which its CRDs are generated from too): types, required fields,
//     enums and patterns (e.g. a duration like "1 s" is refused);
//  2. TypeScript's excess-property check against the same package's type declarations: a field
//     the API does not have (a typo like `intervall`) is refused, as `kubectl apply` refuses it
//     with server-side field validation. The JSON Schemas alone allow unknown fields.
//
//   node validate.mjs OBJECTS.json   ->  prints [{"index", "kind", "name", "errors": [...]}] as JSON
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const here = path.dirname(fileURLToPath(import.meta.url));
const V1 = "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
const MODELS = {
  PodMonitor: { module: `${V1}/PodMonitor`, type: "IPodMonitor" },
  PrometheusRule: { module: `${V1}/PrometheusRule`, type: "IPrometheusRule" },
  ServiceMonitor: { module: `${V1}/ServiceMonitor`, type: "IServiceMonitor" },
};

const objects = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const results = objects.map((obj, index) => ({
  index,
  kind: obj.kind,
  name: obj.metadata?.name ?? "",
  errors: [],
}));

// 1. JSON Schema validation.
for (const [i, obj] of objects.entries()) {
  const model = MODELS[obj.kind];
  if (!model || obj.apiVersion !== "monitoring.coreos.com/v1") {
    results[i].errors.push(`no schema for ${obj.apiVersion} ${obj.kind}`);
    continue;
  }
  const mod = await import(model.module);
  try {
    new mod[obj.kind](obj).validate();
  } catch (err) {
    results[i].errors.push(`schema: ${err.message}`);
  }
}

// 2. Excess-property check: one typed constant per object, one object per line.
const lines = [];
const used = [...new Set(objects.map((o) => o.kind).filter((k) => MODELS[k]))];
for (const kind of used) {
  lines.push(`import type { ${MODELS[kind].type} } from "${MODELS[kind].module}";`);
}
const firstObjectLine = lines.length;
for (const [i, obj] of objects.entries()) {
  const type = MODELS[obj.kind]?.type ?? "unknown";
  lines.push(`export const o${i}: ${type} = ${JSON.stringify(obj)};`);
}
const virtual = path.join(here, "__objects__.ts");
const options = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  target: ts.ScriptTarget.ES2022,
  types: [],
};
const host = ts.createCompilerHost(options);
const source = lines.join("\n");
const getSourceFile = host.getSourceFile.bind(host);
host.getSourceFile = (name, lang, ...rest) =>
  name === virtual ? ts.createSourceFile(name, source, lang, true) : getSourceFile(name, lang, ...rest);
const fileExists = host.fileExists.bind(host);
host.fileExists = (name) => name === virtual || fileExists(name);
const readFile = host.readFile.bind(host);
host.readFile = (name) => (name === virtual ? source : readFile(name));
const program = ts.createProgram([virtual], options, host);
for (const d of ts.getPreEmitDiagnostics(program)) {
  const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
  if (!d.file || d.file.fileName !== virtual) {
    results.forEach((r) => r.errors.push(`typescript: ${message}`));
    continue;
  }
  const { line } = d.file.getLineAndCharacterOfPosition(d.start ?? 0);
  const i = line - firstObjectLine;
  (results[i] ?? results[0]).errors.push(`fields: ${message}`);
}

process.stdout.write(JSON.stringify(results));
