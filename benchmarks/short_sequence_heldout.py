#!/usr/bin/env python3
"""Held-out (leave one source out) figures of plan.py evaluate on short-sequence image rows only.

  python3 benchmarks/short_sequence_heldout.py [--tables benchmarks/published] [--max-tokens 8192] [--json]

Every constant is fitted as plan.py evaluate fits it (on every row of the other sources); only the scored rows are
restricted: images (one latent frame) of at most --max-tokens image tokens, where small per-rank work shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


def main() -> int:
    from ditpar.plan.cost import Tunables
    from ditpar.plan.judge import evaluate, heldout

    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                epilog="example: python3 benchmarks/short_sequence_heldout.py --max-tokens 8192")
    p.add_argument("--tables", default=str(Path(__file__).resolve().parent / "published"))
    p.add_argument("--max-tokens", type=int, default=8192, help="largest image token count scored (default 8192)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    frames = evaluate.load_tables(args.tables)

    def short(row) -> bool:
        return row.shape.frames_tok == 1 and row.shape.tokens <= args.max_tokens

    res = heldout.evaluate_heldout(frames, Tunables(), by="source", only=short)
    d = res["pooled"].as_dict()
    keys = ("pairs", "pairwise_accuracy", "top1_scenarios", "top1_hit_rate", "short_list_recall", "mean_short_list",
            "speedup_rows", "speedup_median_abs_log2", "speedup_within_25pct", "speedup_median_log2",
            "speedup_range_coverage")
    out = {k: d[k] for k in keys}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"short-sequence image rows (one frame, <= {args.max_tokens} tokens), held out by source:")
        for k in keys:
            v = out[k]
            print(f"  {k:<28} {v if v is None or isinstance(v, int) else round(v, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
