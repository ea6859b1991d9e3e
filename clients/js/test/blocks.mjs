// The README's code blocks: found by the HTML comment before them, compiled from TypeScript as a
// user's build would, and written where `@fenecdb/web/client` resolves to this package.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const HERE = new URL('./', import.meta.url);
export const TMP = fileURLToPath(new URL('./.tmp/', HERE));
export const HARNESS = fileURLToPath(new URL('./harness.mjs', HERE));

/** The `ts` blocks that follow `<!-- mark -->` in README.md, in order. */
export function readmeBlocks(mark) {
  const text = readFileSync(new URL('../README.md', HERE), 'utf8');
  const re = new RegExp(`<!-- ${mark} -->\\n\`\`\`ts\\n([\\s\\S]*?)\\n\`\`\`\\n`, 'g');
  return [...text.matchAll(re)].map((m) => m[1]);
}

/** Compiles a block to an ES module file in test/.tmp and answers its path. */
export function compile(source, name) {
  const out = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    reportDiagnostics: true,
  });
  if (out.diagnostics?.length) throw new Error(`${name}: ${out.diagnostics.map((d) => d.messageText).join('; ')}`);
  mkdirSync(TMP, { recursive: true });
  const file = `${TMP}${name}.mjs`;
  writeFileSync(file, out.outputText);
  return file;
}

/** The `// → v` expectations of a block, in order. */
export function expectations(source) {
  return [...source.matchAll(/\/\/ → (.*)$/gm)].map((m) => m[1].trim());
}
