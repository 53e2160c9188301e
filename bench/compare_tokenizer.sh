#!/usr/bin/env bash
# ddpx's GPT-2 tokenizer against tiktoken on the same text and rank file (docs/performance.md,
# "Tokenizer"): tokens/s of the tokenization alone (no reading or writing), best of REPEAT, on
# one thread, and with every core (ddpx's chunked `data tokenize`, tiktoken's
# encode_ordinary_batch over chunks of the same size). Texts: tinyshakespeare (TEXT=FILE, else
# ../shared/data/tinyshakespeare.txt, else where `ddpx data download tinyshakespeare` puts it)
# and a larger concatenation of it with Debian's license texts and Python's standard
# library sources; both tokenizers produce the same tokens (checked here too).
# Usage: bench/compare_tokenizer.sh   (BUILD=build; VOCAB=<scripts/test-vocab's file>, REPEAT=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
vocab="${VOCAB:-$(scripts/test-vocab "$py")}"
text="${TEXT:-../shared/data/tinyshakespeare.txt}"
[[ -f "$text" || -n "${TEXT:-}" ]] || text=data/tinyshakespeare/input.txt
[[ -f "$text" ]] || { echo "compare_tokenizer: no $text; set TEXT=FILE or run" \
  "\`ddpx data download tinyshakespeare\`" >&2; exit 1; }
repeat="${REPEAT:-3}"
cp "$text" "$out/small.txt"
{ for _ in 1 2 3 4; do cat "$text"; done
  cat /usr/share/common-licenses/*
  find /usr/lib/python3*/ -maxdepth 1 -name '*.py' | sort | xargs cat; } > "$out/large.txt"
machine_line "tiktoken $("$py" -c 'import tiktoken; print(tiktoken.__version__)')"
echo "# GPT-2 (r50k_base rank file), tokenization only, best of $repeat; MB = 10^6 bytes"
printf "# %-6s %8s %10s %-22s %12s %8s\n" text MB tokens tokenizer tokens/s MB/s
for name in small large; do
  for threads in 1 "$(nproc)"; do
    best=""
    for _ in $(seq "$repeat"); do
      line=$("$ddpx" data tokenize "$out/$name.txt" --tokenizer gpt2 --vocab "$vocab" \
        --out "$out/$name.$threads" --val_fraction 0 --threads "$threads" | grep '^tokenized')
      best=$(printf '%s\n%s\n' "$best" "$line" | grep . |
        sort -t' ' -k17,17g | head -1)
    done
    echo "$best" > "$out/$name.ddpx.$threads"
  done
  "$py" - "$out" "$name" "$vocab" "$repeat" "$(nproc)" <<'PY'
import os, re, sys, time
import numpy as np, tiktoken, tiktoken.load
out, name, vocab, repeat, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
enc = tiktoken.Encoding(name="gpt2", pat_str=pat, mergeable_ranks=tiktoken.load.load_tiktoken_bpe(vocab),
                        special_tokens={"<|endoftext|>": 50256})
text = open(os.path.join(out, name + ".txt"), encoding="utf-8", newline="").read()
mb = len(text.encode()) / 1e6
# Chunks of about 1 MiB as ddpx cuts them (after a newline that printable ASCII follows), and
# where a non-space precedes that newline: tiktoken encodes each chunk without the next one's
# first character, which GPT-2's lookahead would see after a run of whitespace.
chunks, start = [], 0
for m in re.finditer(r"(?<=\S)\n(?=[!-~])", text):
    if m.end() - start >= 1 << 20:
        chunks.append(text[start:m.end()]); start = m.end()
chunks.append(text[start:])
def best(f):
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); r = f(); times.append(time.perf_counter() - t)
    return min(times), r
one, tokens = best(lambda: enc.encode_ordinary(text))
many, batch = best(lambda: enc.encode_ordinary_batch(chunks, num_threads=cores))
assert sum(batch, []) == tokens
n = len(tokens) + 1  # and <|endoftext|>, as ddpx counts it
ddpx_tokens = np.fromfile(os.path.join(out, name + ".1", "train.bin"), dtype=np.uint16, offset=1024)
assert ddpx_tokens.tolist() == [50256] + tokens, "ddpx and tiktoken differ"
for threads in (1, cores):
    line = open(os.path.join(out, f"{name}.ddpx.{threads}")).read()
    secs = float(re.search(r"in ([0-9.]+) s on", line).group(1))
    print(f"  {name:<6} {mb:8.2f} {n:10d} {'ddpx %d thread%s' % (threads, 's' if threads > 1 else ''):<22} {n / secs:12.0f} {mb / secs:8.2f}")
print(f"  {name:<6} {mb:8.2f} {n:10d} {'tiktoken 1 thread':<22} {n / one:12.0f} {mb / one:8.2f}")
print(f"  {name:<6} {mb:8.2f} {n:10d} {'tiktoken %d threads' % cores:<22} {n / many:12.0f} {mb / many:8.2f}")
PY
done
