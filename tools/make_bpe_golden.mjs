// The byte-level BPE's oracle (tests/data/golden/bpe/): trains a tokenizer with ours
// (build/tools/bpe_train, 512 tokens on tinyshakespeare's first 200,000 bytes), then encodes
// the test texts with Hugging Face's own tokenizer.json implementation in JavaScript
// (@huggingface/tokenizers, npm; not ours) and writes tokenizer.json and cases.json
// ({"texts": [...], "ids": [[...], ...]}) for tests/data/bpe_tokenizer_test.cpp.
// Usage (from the repository, after building): npm install --prefix /tmp/bpe_oracle @huggingface/tokenizers &&
//        NODE_PATH=/tmp/bpe_oracle/node_modules node tools/make_bpe_golden.mjs
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";

const require = createRequire(process.env.NODE_PATH ? process.env.NODE_PATH + "/" : import.meta.url);
const { Tokenizer } = require("@huggingface/tokenizers");
const out = "tests/data/golden/bpe";
mkdirSync(out, { recursive: true });
execFileSync("build/tools/bpe_train", ["--text", "../shared/data/tinyshakespeare/input.txt", "--vocab-size", "512",
  "--max-bytes", "200000", "--out", `${out}/tokenizer.json`]);
const texts = [
  "ROMEO:\nGood morrow, Juliet! What's the hour?",
  "First Citizen:\nBefore we proceed any further, hear me speak.\n\n",
  "  leading spaces, trailing spaces   \n\tand tabs\t",
  "Café naïve résumé — “quotes” ‘single’ … €5",
  "日本語のテキスト and 中文 mixed with English",
  "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧 sequences",
  "numbers 1234567 3.14159 -42 1e10 and 0x1F",
  "I'm you're they've we'll she'd it's DON'T",
  "",
];
const tok = new Tokenizer(JSON.parse(readFileSync(`${out}/tokenizer.json`, "utf8")), {});
const ids = texts.map((t) => Array.from(tok.encode(t).ids));
writeFileSync(`${out}/cases.json`, JSON.stringify({ oracle: "@huggingface/tokenizers", texts, ids }, null, 1) + "\n");
console.log(`wrote ${out}: ${texts.length} cases`);
