// Preloaded into the jsii node runtime (NODE_OPTIONS=--require, set by modules/_node.py).
//
// @cdktn/provider-google's lib/index.js requires all of its ~1,800 resource
// namespaces (230 MB of JavaScript) when the assembly loads: ~4 s of every synth,
// for the ~15 namespaces a stack uses. This replaces that one file's exports with
// getters that require a namespace the first time the jsii kernel looks it up
// (the kernel finds a type by walking `closure[namespace][Type]`), so the result
// is the same objects, loaded on demand. Anything that does not look exactly like
// the generated index (a name->directory table of namespace exports) is loaded
// the normal way. With TGK_LAZY_PROVIDER_DEBUG set, the process reports at exit
// how many namespaces it loaded (tests/test_synth.py reads it).
"use strict";

const fs = require("fs");
const path = require("path");
const Module = require("module");

const PACKAGE = "@cdktn/provider-google";
const EXPORT = /^exports\.([A-Za-z_$][\w$]*) = __importStar\(require\("(\.\/[\w.-]+\/index)"\)\);$/;
const VOID = /^exports\.[\w$]+( = exports\.[\w$]+)* = void 0;$/;

function isProviderIndex(filename) {
  if (path.basename(filename) !== "index.js" || path.basename(path.dirname(filename)) !== "lib") return false;
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(filename, "..", "..", "package.json"), "utf8"));
    return pkg.name === PACKAGE && path.resolve(path.dirname(filename), "..", pkg.main || "") === filename;
  } catch {
    return false;
  }
}

// name -> relative path of every namespace export, or null when the file holds anything else.
function namespaces(source) {
  const table = [];
  let body = false;
  for (const raw of source.split("\n")) {
    const line = raw.trim();
    if (line.startsWith('Object.defineProperty(exports, "__esModule"')) {
      body = true;
      continue;
    }
    if (!body || line === "" || line.startsWith("//")) continue;
    if (VOID.test(line)) continue;
    const m = EXPORT.exec(line);
    if (!m) return null;
    table.push([m[1], m[2]]);
  }
  const requires = (source.match(/\brequire\(/g) || []).length;
  return body && table.length > 0 && table.length === requires ? table : null;
}

const load = Module._extensions[".js"];
Module._extensions[".js"] = function lazyProviderIndex(module, filename) {
  if (!isProviderIndex(filename)) return load(module, filename);
  const table = namespaces(fs.readFileSync(filename, "utf8"));
  if (!table) return load(module, filename);
  const exports = module.exports;
  const loaded = [];
  if (process.env.TGK_LAZY_PROVIDER_DEBUG) {
    process.on("exit", () => {
      process.stderr.write(`tgk-lazy-provider: loaded ${loaded.length} of ${table.length} namespaces: ${loaded.join(",")}\n`);
    });
  }
  Object.defineProperty(exports, "__esModule", { value: true });
  for (const [name, rel] of table) {
    Object.defineProperty(exports, name, {
      enumerable: true,
      configurable: true,
      get() {
        const value = module.require(rel);
        loaded.push(name);
        Object.defineProperty(exports, name, { enumerable: true, configurable: true, writable: true, value });
        return value;
      },
    });
  }
};
