#!/usr/bin/env python3
"""The option matrix (issue #27): every flag that changes how `ddpx train` runs, crossed pairwise.

One table below (FACTORS, RULES, tolerances) drives everything:
  cells   the covering array: valid cells in which every compatible pair of values appears at
          least once, and one cell for each refused pair (a valid cell with that pair put in)
  docs    writes the compatibility table into docs/cli.md between its markers (--check: fails
          where the file is not what the table writes)
  run     trains each cell a few steps with real processes and checks its declared outcome:
          a valid cell's final weights (its checkpoint, through `ddpx export`) are those of a
          one-process run on the same global batch within the cell's tolerance, a fraction of
          the update that run made; a refused cell exits non-zero with one line naming both flags
          (one `ddpx train` where train/options.cpp refuses the pair before joining, whatever
          the world; through `ddpx run N` where the plan refuses it after joining)
  run --mutate no-update|no-sync
          breaks each valid cell and reports whether its tolerance catches it (MUTATIONS below)

Usage: option_matrix.py cells | docs [--check] | run --ddpx BIN [--only N] [--keep DIR]
                                                    [--mutate no-update|no-sync]
"""
import argparse
import collections
import io
import itertools
import os
import pickle
import random
import re
import subprocess
import sys
import tempfile
import time
import zipfile

# The flags and the values crossed. `world` is the number of processes (`ddpx run N --`).
FACTORS = [
    ("world", [1, 2, 4]),
    ("model", ["mlp", "resnet20"]),
    ("transport", ["auto", "gloo"]),
    ("comm_hook", ["allreduce", "bf16", "powersgd"]),
    ("accumulation_steps", [1, 2]),
    ("amp", ["off", "bf16"]),
    ("clip_grad_norm", [0, 1]),
    ("ema_decay", [0, 0.9]),
    ("sync_bn", [False, True]),
    ("shard", ["none", "optimizer", "full"]),
    ("pipeline_parallel", [1, 2]),
    ("tensor_parallel", [1, 2]),
    ("deterministic", [False, True]),
]
NAMES = [name for name, _ in FACTORS]


def hook_compresses(c):
    return c["comm_hook"] != "allreduce"


# Refused pairs: (flag a, predicate on a's value, flag b, predicate on b's value, what ddpx
# prints[, also]). A cell that holds the pair is refused with a line holding the text; `also`,
# a list of (flag, predicate), makes it a refused triple: the pair alone trains.
RULES = [
    ("shard", lambda v: v != "none", "comm_hook", lambda v: v != "allreduce",
     "reduce-scatters gradients uncompressed"),
    ("pipeline_parallel", lambda v: v > 1, "sync_bn", lambda v: v,
     "a pipeline normalises each micro-batch"),
    ("pipeline_parallel", lambda v: v > 1, "comm_hook", lambda v: v != "allreduce",
     "a pipeline stage's replicas average"),
    ("tensor_parallel", lambda v: v > 1, "sync_bn", lambda v: v, "--tensor_parallel 2 with --sync_bn"),
    ("tensor_parallel", lambda v: v > 1, "comm_hook", lambda v: v != "allreduce",
     "the replicas average their pieces"),
    ("tensor_parallel", lambda v: v > 1, "model", lambda v: v == "resnet20",
     "resnet20 has no tensor-parallel plan"),
    ("deterministic", lambda v: v, "shard", lambda v: v != "none",
     "and --clip_grad_norm: the norm over the shards", [("clip_grad_norm", lambda v: v > 0)]),
    ("deterministic", lambda v: v, "pipeline_parallel", lambda v: v > 1,
     "--deterministic with --pipeline_parallel"),
    ("deterministic", lambda v: v, "tensor_parallel", lambda v: v > 1,
     "--deterministic with --tensor_parallel"),
    ("deterministic", lambda v: v, "comm_hook", lambda v: v != "allreduce",
     "--deterministic with --comm_hook"),
    ("deterministic", lambda v: v, "sync_bn", lambda v: v, "--deterministic with --sync_bn"),
    ("deterministic", lambda v: v, "accumulation_steps", lambda v: v > 1,
     "--deterministic with --accumulation_steps"),
    ("sync_bn", lambda v: v, "model", lambda v: v == "mlp", "has no BatchNorm layers"),
    ("world", lambda v: v == 1, "pipeline_parallel", lambda v: v > 1,
     "does not divide the world of 1 ranks"),
    ("world", lambda v: v == 1, "tensor_parallel", lambda v: v > 1,
     "not a whole number of tensor-parallel groups"),
    ("world", lambda v: v == 2, "pipeline_parallel", lambda v: v > 1,
     "is not a whole number of 4-rank replicas", [("tensor_parallel", lambda v: v > 1)]),
]

# Refused once the job has joined, by the plan, before its first collective (the others are
# refused by train/options.cpp before joining).
AFTER_JOINING = [r for r in RULES if r[4] in (
    "resnet20 has no tensor-parallel plan", "has no BatchNorm layers",
    "does not divide the world of 1 ranks", "not a whole number of tensor-parallel groups",
    "is not a whole number of 4-rank replicas")]

LR = 0.01
# No update at all: ddpx refuses --learning_rate 0, and 1e-30 x a gradient is below the last bit
# of every weight, so the weights stay at their initial values.
NO_UPDATE_LR = 1e-30
BATCH = 32  # the global batch (--batch_size_scaled: split over the data-parallel ranks)
STEPS = 3


def also(rule):
    return rule[5] if len(rule) > 5 else []


def refusals(c):
    def holds(r):
        conditions = [(r[0], r[1]), (r[2], r[3])] + also(r)
        return all(name in c and pred(c[name]) for name, pred in conditions)
    return [r for r in RULES if holds(r)]


# The mutation runs that justify tolerance() (a 2-core Xeon, at the commit that added them):
# `run --mutate no-update` trains each cell at learning rate 1e-30 (every weight stays at its
# initial value, as with gradients zeroed); `run --mutate no-sync` stands in for skipped
# averaging where a cell has 2 or more data-parallel replicas: what rank 0 reaches alone, one
# process on its share of each global batch (32 / replicas samples). "measured" is the cell as
# it is; each column is distance() from the one-process reference, and a mutation is caught
# where it exceeds "allowed" (all were). Cell 11 is the weak one: BatchNorm over each rank's
# every-4th samples, which no one-process run groups alike, leaves it little room.
#
# cell  measured  allowed  no-update      no-sync
#    0    0.0018     0.01          1  (1 replica)
#    1     0.196      0.4          1  (1 replica)
#    2     0.012     0.06          1        0.543
#    3         0    1e-06          1        1.052
#    4     0.067      0.3          1        0.672
#    5   9.1e-07   0.0001          1  (1 replica)
#    6   1.3e-06   0.0001          1  (1 replica)
#    7         0    1e-06          1        0.614
#    8   1.3e-05   0.0001          1  (1 replica)
#    9     0.191      0.4          1        1.397
#   10      0.16      0.4          1  (1 replica)
#   11     0.789      0.9          1        0.965
#   12     0.064      0.3          1        1.052
#   13    0.0095     0.06          1  (1 replica)
#   14         0    1e-06          1  (1 replica)
#   15     0.025     0.06          1         0.85
#   16    0.0012     0.01          1  (1 replica)
#   17    0.0025     0.06          1  (1 replica)
#   18    0.0097     0.06          1  (1 replica)
#   19         0    1e-06          1  (1 replica)


def tolerance(c):
    """How far a valid cell's final weights may be from the one-process reference's, as a fraction
    of the update the reference made (distance(): 1 is no update at all), and why: the largest
    bound of the classes the cell is in, each a few times the most its cells were measured at
    and under what every mutation of those cells gave (the table above)."""
    if c["deterministic"]:
        return 1e-6, "bitwise the same weights"
    bn = c["model"] == "resnet20"
    group, run_of_batch = batch_norm_group(c)
    bf16 = c["amp"] == "bf16" or (c["comm_hook"] == "bf16" and c["world"] > 1)
    classes = [(1e-4, "fp32: the same sums in another order")]
    if bn:
        classes.append((0.01, "fp32 through BatchNorm: the same sums in another order"))
    if bf16:
        classes.append((0.06, "bf16 rounding"))
    if bn and c["amp"] == "bf16":
        classes.append((0.4, "bf16 autocast through BatchNorm at its first steps"))
    if c["comm_hook"] == "powersgd":
        classes.append((0.3, "PowerSGD's rank-2 approximation from step 2"))
    if bn and group < BATCH and not run_of_batch:
        classes.append((0.9, f"BatchNorm over each rank's {group} samples (every "
                             f"{data_parallel(c)}th of the batch), which no one-process run "
                             f"groups alike"))
    return max(classes)


def covering_cells(seed=1):
    """Valid cells covering every compatible pair of values, greedily (AETG's way)."""
    rng = random.Random(seed)
    uncovered = set()
    for (i, (a, av)), (j, (b, bv)) in itertools.combinations(enumerate(FACTORS), 2):
        for x in av:
            for y in bv:
                if not refusals({a: x, b: y}):
                    uncovered.add((i, x, j, y))
    cells = []
    while uncovered:
        best, best_gain = None, -1
        for _ in range(400):
            c = {name: rng.choice(values) for name, values in FACTORS}
            # Start from an uncovered pair, so that each cell gains at least one.
            i, x, j, y = rng.choice(sorted(uncovered, key=str))
            c[NAMES[i]], c[NAMES[j]] = x, y
            if refusals(c):
                continue
            gain = sum(1 for (p, u, q, v) in uncovered
                       if c[NAMES[p]] == u and c[NAMES[q]] == v)
            if gain > best_gain:
                best, best_gain = c, gain
        if best is None:
            raise SystemExit("option_matrix: no valid cell covers what is left: %s"
                             % sorted(uncovered, key=str)[:5])
        cells.append(best)
        uncovered = {(p, u, q, v) for (p, u, q, v) in uncovered
                     if not (best[NAMES[p]] == u and best[NAMES[q]] == v)}
    return cells


BASE = {"world": 2, "model": "mlp", "transport": "auto", "comm_hook": "allreduce",
        "accumulation_steps": 1, "amp": "off", "clip_grad_norm": 0, "ema_decay": 0,
        "sync_bn": False, "shard": "none", "pipeline_parallel": 1, "tensor_parallel": 1,
        "deterministic": False}


def refused_cells():
    """One cell a refused pair: the base cell with the pair's first refused values."""
    out = []
    for rule in RULES:
        c = dict(BASE)
        for name, pred in [(rule[0], rule[1]), (rule[2], rule[3])] + also(rule):
            c[name] = next(v for v in dict(FACTORS)[name] if pred(v))
        a = rule[0]
        if a != "world" and (c["pipeline_parallel"] > 1 or c["tensor_parallel"] > 1):
            c["world"] = 2
        # Refused before joining (train/options.cpp) comes first: a plan's own refusal (the
        # MLP's lack of BatchNorm, say) may be in the cell too, behind it.
        first = [r for r in refusals(c) if r not in AFTER_JOINING] or refusals(c)
        assert first == [rule], (rule[4], [r[4] for r in refusals(c)])
        out.append((c, rule))
    return out


def flags(c):
    f = ["--model", c["model"], "--transport", c["transport"]]
    if c["comm_hook"] != "allreduce":
        f += ["--comm_hook", c["comm_hook"]]
        if c["comm_hook"] == "powersgd":
            f += ["--powersgd_rank", "2", "--powersgd_start_iter", "2"]
    for name in ("accumulation_steps", "clip_grad_norm", "ema_decay", "pipeline_parallel",
                 "tensor_parallel"):
        if c[name] != BASE[name]:
            f += ["--" + name, str(c[name])]
    if c["amp"] != "off":
        f += ["--amp", c["amp"]]
    if c["sync_bn"]:
        f.append("--sync_bn")
    if c["shard"] != "none":
        f += ["--shard", c["shard"]]
    if c["deterministic"]:
        f += ["--deterministic", "--deterministic_atom", str(c.get("atom", 4))]
    return f


# Debian's Fashion-MNIST, every cell's data; run_cells() points DATA_FLAGS at a copy it gunzipped
# once, which each of the matrix's 62 training processes would otherwise inflate for itself
# (0.2 CPU-s each: `ddpx train` reads an uncompressed idx file where there is no .gz beside it).
DEBIAN_FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
DATA_FLAGS = []


def unpack_fashion_mnist(tmp):
    import gzip
    import shutil
    if not os.path.isdir(DEBIAN_FASHION_MNIST):
        return []  # ddpx's own default folder, and its message where that is empty
    out = os.path.join(tmp, "fashion-mnist")
    os.makedirs(out)
    for name in os.listdir(DEBIAN_FASHION_MNIST):
        if name.endswith(".gz"):
            with gzip.open(os.path.join(DEBIAN_FASHION_MNIST, name)) as src, \
                    open(os.path.join(out, name[:-3]), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    return ["--data_dir", out]


def common(batch, accumulate=1, lr=LR):
    # No random flips: their streams are a rank's, so they differ with the world size (as
    # PyTorch's DataLoader workers' do); --deterministic keys them by the sample instead.
    return ["train", "--num_epochs", "1", "--limit_train_batches", str(STEPS * accumulate),
            "--no_flip", *DATA_FLAGS,
            "--limit_test_batches", "1", "--eval_batch_size", "64", "--batch_size", str(batch),
            "--optimizer", "sgd", "--learning_rate", str(lr), "--threads", "1",
            "--loader_workers", "1", "--no_progress"]


def command(ddpx, c, log_dir, save_dir, lr=LR):
    accumulate = c["accumulation_steps"]
    argv = (common(BATCH // accumulate, accumulate, lr) + ["--batch_size_scaled"] + flags(c)
            + ["--save_dir", save_dir])
    if c["world"] == 1:
        return [ddpx] + argv
    return [ddpx, "run", str(c["world"]), "--log_dir", log_dir, "--threads_per_worker", "1",
            "--"] + argv


def data_parallel(c):
    return c["world"] // (c["pipeline_parallel"] * c["tensor_parallel"])


def batch_norm_group(c):
    """The samples each BatchNorm statistic of the cell covers, and whether they are one run of
    the global batch (an atom of --deterministic): a rank's micro-batch (the accumulation's and
    the pipeline's), or all ranks' together with --sync_bn. The sampler deals the permutation out
    in turn, so a rank's own share of a batch is every N-th sample, all ranks' a run."""
    dp = data_parallel(c)
    microbatches = 2 * c["pipeline_parallel"] if c["pipeline_parallel"] > 1 else 1
    m = BATCH // (dp * c["accumulation_steps"] * microbatches)
    if c["deterministic"]:
        return 4, True
    if c["sync_bn"]:
        return m * dp, True
    return m, dp == 1


def reference_command(ddpx, c, save_dir, batch=BATCH, lr=LR):
    """One process, the whole global batch, the flags that change the arithmetic: a BatchNorm
    model's statistics over the cell's groups (--deterministic's atoms), where those are runs."""
    r = dict(BASE, world=1, model=c["model"], amp=c["amp"], clip_grad_norm=c["clip_grad_norm"],
             deterministic=c["deterministic"])
    group, run_of_batch = batch_norm_group(c)
    if c["model"] == "resnet20" and group < batch and run_of_batch:
        r.update(deterministic=True, atom=group)
    return [ddpx] + common(batch, 1, lr) + flags(r) + ["--save_dir", save_dir]


def run(argv, timeout=240):
    start = time.time()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, time.time() - start


def describe(c):
    return " ".join(f"{k}={c[k]}" for k in NAMES if c[k] != BASE[k] or k == "world")


def read_state_dict(path):
    """The parameters of a state_dict that torch.save wrote (`ddpx export`), as float64 numpy
    arrays by name, read from its zip without importing torch (seconds on 2 cores)."""
    import numpy as np
    dtypes = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
              "HalfStorage": np.float16, "LongStorage": np.int64, "IntStorage": np.int32}
    with zipfile.ZipFile(path) as z:
        pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        root = pkl[:-len("data.pkl")]

        def rebuild(storage, offset, size, stride, *_):
            if storage is None:  # a dtype numpy has no type for (bf16): not a parameter here
                return None
            item = storage.itemsize
            return np.lib.stride_tricks.as_strided(
                storage[offset:], shape=tuple(size), strides=tuple(s * item for s in stride))

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return rebuild
                if (module, name) == ("collections", "OrderedDict"):
                    return collections.OrderedDict
                if module == "torch" and name.endswith("Storage"):
                    return name
                raise pickle.UnpicklingError(f"{path}: unexpected {module}.{name}")

            def persistent_load(self, pid):
                _, kind, key, _, _ = pid
                if kind not in dtypes:
                    return None
                return np.frombuffer(z.read(f"{root}data/{key}"), dtype=dtypes[kind])

        state = Unpickler(io.BytesIO(z.read(pkl))).load()
    # Parameters only: BatchNorm's running statistics are a rank's (or a micro-batch's) under
    # per-rank statistics and are not what a missing update would move.
    return {k: v.astype(np.float64) for k, v in state.items()
            if v is not None and v.dtype.kind == "f" and "running_" not in k}


def final_weights(ddpx, save_dir):
    """The parameters of the run's epoch-1 checkpoint (whole or sharded), via `ddpx export`."""
    checkpoint = os.path.join(save_dir, "checkpoint_epoch0001.ddpx")
    out = save_dir + ".pt"
    code, text, _ = run([ddpx, "export", "--checkpoint", checkpoint, "--out", out], timeout=120)
    if code != 0:
        raise RuntimeError(f"ddpx export {checkpoint}: exit {code}\n{text[-1500:]}")
    return read_state_dict(out)


def distance(w, want, init):
    """How far w is from want, as a fraction of the update want made from init (L2 norms over
    every parameter): 0 is want itself, 1 is no update at all (w = init)."""
    import numpy as np
    assert w.keys() == want.keys(), (sorted(w), sorted(want))
    off = sum(float(np.sum((w[k] - want[k]) ** 2)) for k in want)
    moved = sum(float(np.sum((want[k] - init[k]) ** 2)) for k in want)
    return (off / moved) ** 0.5


def run_matrix(ddpx, only, keep, mutate=None):
    if keep:
        return run_cells(ddpx, only, keep, mutate)
    # Each cell leaves a checkpoint and its export (200 MB in all): gone with the folder.
    with tempfile.TemporaryDirectory(prefix="ddpx-matrix.") as tmp:
        return run_cells(ddpx, only, tmp, mutate)


def run_cells(ddpx, only, tmp, mutate):
    failures, references, inits, caught, missed = [], {}, {}, [], []
    DATA_FLAGS[:] = unpack_fashion_mnist(tmp)
    cells = [(c, None) for c in covering_cells()] + refused_cells()
    if only is not None:
        cells = [cells[only]]
    if mutate:  # the valid cells only: the refusals have no update to miss
        cells = [(c, r) for c, r in cells if r is None]

    def weights_of(argv, save_dir, what):
        code, out, _ = run(argv)
        if code != 0:
            print(f"FAIL {what}: exit {code}\n  $ {' '.join(argv)}\n{out[-1500:]}", flush=True)
            return None
        return final_weights(ddpx, save_dir)

    for n, (c, rule) in enumerate(cells):
        label = f"cell {n} ({describe(c)})"
        if rule is not None:
            # A pair train/options.cpp refuses is refused by each process before it joins, the
            # same line whatever the world: one `ddpx train` (a second of CPU) checks it, where
            # `ddpx run 2` started three. The pairs a plan refuses after joining run as the cell
            # says, through the launcher.
            if rule not in AFTER_JOINING:
                c = dict(c, world=1)
                label = f"cell {n} ({describe(c)})"
            argv = command(ddpx, c, os.path.join(tmp, f"logs{n}"), os.path.join(tmp, f"save{n}"))
            code, out, seconds = run(argv)
            lines = [l for l in out.splitlines() if rule[4] in l]
            ok = code != 0 and lines
            print(f"{'ok  ' if ok else 'FAIL'} {label}: refused ({seconds:.1f} s): "
                  f"{lines[0].strip() if lines else out.strip()[-300:]}", flush=True)
            if not ok:
                failures.append(label)
            continue
        save = os.path.join(tmp, f"save{n}")
        if mutate == "no-sync" and data_parallel(c) == 1:
            print(f"--   {label}: no data-parallel replicas to skip the sync of", flush=True)
            continue
        start = time.time()
        if mutate == "no-sync":
            # What rank 0 reaches when its replicas never average: its own share of each global
            # batch, alone (the first B/N samples where its share is every N-th: the same size).
            argv = reference_command(ddpx, c, save, batch=BATCH // data_parallel(c))
        else:
            argv = command(ddpx, c, os.path.join(tmp, f"logs{n}"), save,
                           lr=NO_UPDATE_LR if mutate == "no-update" else LR)
        got = weights_of(argv, save, label)
        seconds = time.time() - start
        if got is None:
            failures.append(label)
            continue
        key = " ".join(reference_command(ddpx, c, "-"))
        if key not in references:
            ref_save = os.path.join(tmp, f"ref{len(references)}")
            references[key] = weights_of(reference_command(ddpx, c, ref_save), ref_save,
                                         f"reference for {label}")
        if c["model"] not in inits:  # the initial weights: the reference with no update
            init_save = os.path.join(tmp, f"init-{c['model']}")
            inits[c["model"]] = weights_of(reference_command(ddpx, c, init_save, lr=NO_UPDATE_LR),
                                           init_save, f"initial weights of {c['model']}")
        want, init = references[key], inits[c["model"]]
        tol, why = tolerance(c)
        if want is None or init is None:
            failures.append(label)
            continue
        d = distance(got, want, init)
        ok = d <= tol
        if mutate:
            (missed if ok else caught).append(label)
            print(f"{'MISSED' if ok else 'caught'} {label} with {mutate}: {d:.4f} of the update "
                  f"off one process's weights (the cell allows {tol}: {why})", flush=True)
            continue
        print(f"{'ok  ' if ok else 'FAIL'} {label}: weights {d:.2e} of the update off one "
              f"process's (within {tol}: {why}; {seconds:.1f} s)", flush=True)
        if not ok:
            print(f"  $ {' '.join(argv)}", flush=True)
            failures.append(label)
    if mutate:
        print(f"option matrix with {mutate}: {len(caught)} cells caught it, {len(missed)} missed "
              f"it, {len(failures)} failed to run")
        return 1 if missed or failures else 0
    valid = sum(1 for _, r in cells if r is None)
    print(f"option matrix: {len(cells)} cells ({valid} that train, {len(cells) - valid} refused), "
          f"{len(failures)} failed")
    return 1 if failures else 0


BEGIN, END = "<!-- option-matrix:begin -->", "<!-- option-matrix:end -->"


def docs_table():
    def values(name, pred):
        vs = [v for v in dict(FACTORS)[name] if pred(v)]
        def show(v):
            if name == "world":
                return f"`ddpx run {v}`" if v > 1 else "one process"
            if isinstance(v, bool):
                return f"`--{name}`"
            return f"`--{name} {v}`"
        return " or ".join(show(v) for v in vs)
    rows = ["| with | refused: | ddpx says (one line, exit 2, or before the first collective) |",
            "|---|---|---|"]
    for rule in RULES:
        a, pa, b, pb, text = rule[:5]
        with_also = "".join(f" (with {values(n, p)})" for n, p in also(rule))
        rows.append(f"| {values(a, pa)} | {values(b, pb)}{with_also} | \"...{text}...\" |")
    def level(v):
        return {False: "off", True: "on"}.get(v, v) if isinstance(v, bool) else v
    factors = ", ".join(f"`{n}` ({' / '.join(str(level(v)) for v in vs)})" for n, vs in FACTORS)
    cells = covering_cells()
    return "\n".join([
        BEGIN,
        f"Generated by `tests/matrix/option_matrix.py docs` from the table that the `matrix` "
        f"tests run. The flags crossed: {factors}. Every pair of values not below trains: the "
        f"matrix's {len(cells)} valid cells hold each such pair at least once, and each "
        f"cell's weights after {STEPS} steps are one process's on the same global batch of "
        f"{BATCH}, off by at most a stated fraction of the update that process made (fp32 1e-4, "
        f"through BatchNorm 0.01, bf16 0.06, bf16 autocast through BatchNorm 0.4, PowerSGD 0.3, "
        f"BatchNorm over each rank's every-Nth samples 0.9, `--deterministic` bitwise); each "
        f"bound fails the cell with no update at all (1.0) and, with 2 or more data-parallel "
        f"ranks, with their averaging skipped. The pairs below are refused, each by one cell "
        f"that holds it alone:",
        "",
        *rows,
        END,
    ])


def write_docs(check):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "cli.md")
    text = open(path).read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"option_matrix: {path} lacks the markers {BEGIN} ... {END}")
    new = text[:text.index(BEGIN)] + docs_table() + text[text.index(END) + len(END):]
    if check:
        if new != text:
            print(f"option_matrix: {path}'s option table is not what the matrix writes; run "
                  f"tests/matrix/option_matrix.py docs", file=sys.stderr)
            return 1
        print("option_matrix: docs/cli.md's table matches the matrix")
        return 0
    with open(path + ".tmp", "w") as f:
        f.write(new)
    os.replace(path + ".tmp", path)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("cells")
    d = sub.add_parser("docs")
    d.add_argument("--check", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("--ddpx", required=True)
    r.add_argument("--only", type=int)
    r.add_argument("--keep")
    r.add_argument("--mutate", choices=["no-update", "no-sync"],
                   help="break each valid cell and report whether its tolerance catches it")
    a = ap.parse_args()
    if a.what == "cells":
        for n, c in enumerate(covering_cells()):
            print(f"cell {n}: {describe(c)}  (tolerance {tolerance(c)[0]})")
        for c, rule in refused_cells():
            print(f"refused: {describe(c)}  -> {rule[4]}")
        return 0
    if a.what == "docs":
        return write_docs(a.check)
    return run_matrix(a.ddpx, a.only, a.keep, a.mutate)


if __name__ == "__main__":
    sys.exit(main())
