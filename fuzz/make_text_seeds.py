#!/usr/bin/env python3
"""Writes the seeds of fuzz_token_file (fuzz/corpus/token_file) the way llm.c's writer
(dev/data/data_common.py, write_datafile) and nanoGPT's prepare.py write token files, and of
fuzz_rank_file (fuzz/corpus/rank_file) as tiktoken's rank files are laid out (base64 token, a
space, the rank), and of fuzz_vocab_txt (fuzz/corpus/vocab_txt) as BERT's vocab.txt is laid out
(one WordPiece token per line), and of fuzz_hf_bpe (fuzz/corpus/hf_bpe) as Hugging Face saves GPT-2's
tokenizer (vocab.json, a NUL, merges.txt; or a tokenizer.json), small so that each fuzz run stays fast.
Usage: /work/main/.venv/bin/python fuzz/make_text_seeds.py  (rewrites the seed files in place)"""
import base64
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    folder = os.path.join(here, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def llmc(tokens, magic, version, dtype):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(tokens)
    return header.tobytes() + np.array(tokens, dtype=dtype).tobytes()


tokens = [50256, 15496, 11, 995, 0, 198, 464, 2068]
write("token_file", "gpt2_v1.bin", llmc(tokens, 20240520, 1, np.uint16))
write("token_file", "llama3_v7.bin", llmc(tokens + [128000, 70000], 20240801, 7, np.uint32))
write("token_file", "empty_v1.bin", llmc([], 20240520, 1, np.uint16))
write("token_file", "headerless.bin", np.array(tokens, dtype=np.uint16).tobytes())


def ranks(tokens):
    return b"".join(base64.b64encode(t) + b" %d\n" % r for r, t in enumerate(tokens))


single_bytes = [bytes([b]) for b in range(256)]
merges = [b"th", b" t", b"he", b" the", b"in", b"er", b"\xe2\x80", b"\xe2\x80\x99"]
write("rank_file", "bytes_and_merges.tiktoken", ranks(single_bytes + merges))
write("rank_file", "crlf.tiktoken", ranks(single_bytes + merges[:2]).replace(b"\n", b"\r\n"))
write("rank_file", "duplicate_rank.tiktoken", ranks(single_bytes) + b"dGg= 3\n")
write("rank_file", "bytes_only.tiktoken", ranks(single_bytes))

specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
pieces = ["the", "un", "##aff", "##able", "caf\u00e9", "\u4e2d", "\U0001f642", "##s", ",", "."]
vocab = "\n".join(specials + pieces) + "\n"
write("vocab_txt", "bert.txt", vocab.encode("utf-8"))
write("vocab_txt", "crlf_no_final_newline.txt", vocab.replace("\n", "\r\n").rstrip().encode("utf-8"))
write("vocab_txt", "duplicate.txt", (vocab + "the\n").encode("utf-8"))
write("vocab_txt", "no_unk.txt", "\n".join(pieces).encode("utf-8"))


# GPT-2's byte alphabet (transformers' bytes_to_unicode): printable bytes first, the rest from 256.
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
alphabet = {b: chr(b) for b in printable}
alphabet.update({b: chr(256 + n) for n, b in enumerate(b for b in range(256) if b not in printable)})
order = printable + [b for b in range(256) if b not in printable]
hf_merges = [(b"t", b"h"), (b" ", b"t"), (b"h", b"e"), (b" t", b"he"), (b"\xe2", b"\x80")]
spell = lambda bs: "".join(alphabet[b] for b in bs)
hf_vocab = {spell([b]): r for r, b in enumerate(order)}
for a, b in hf_merges:
    hf_vocab[spell(a + b)] = len(hf_vocab)
merges_txt = "#version: 0.2\n" + "".join(spell(a) + " " + spell(b) + "\n" for a, b in hf_merges)
import json
write("hf_bpe", "gpt2_like.bin", (json.dumps(hf_vocab, ensure_ascii=False) + "\0" + merges_txt).encode("utf-8"))
hub = dict(hf_vocab, **{"<|endoftext|>": len(hf_vocab)})
write("hf_bpe", "with_endoftext.bin", (json.dumps(hub) + "\0" + merges_txt.replace("\n", "\r\n")).encode("utf-8"))
write("hf_bpe", "bytes_only.bin", (json.dumps({spell([b]): r for r, b in enumerate(order)}) + "\0").encode("utf-8"))
tokenizer_json = {"version": "1.0", "added_tokens": [{"id": len(hf_vocab), "content": "<|endoftext|>", "special": True}],
                  "model": {"type": "BPE", "vocab": hf_vocab, "merges": [[spell(a), spell(b)] for a, b in hf_merges]}}
write("hf_bpe", "tokenizer.json", json.dumps(tokenizer_json).encode("utf-8"))
