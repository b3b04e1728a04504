"""Write a small text dataset in a format MaxText's Grain pipeline reads, with that format's own writer.

Runs in the MaxText venv (its array_record, pyarrow and tensorboardX): the files are made by
the libraries that define the formats, not by the toolkit, so the toolkit's checks and the
real-data run are tested on files nobody here framed by hand.

    <maxtext venv>/bin/python scripts/make_text_dataset.py OUT_DIR [--format arrayrecord|parquet|tfrecord]
        [--shards 2] [--records 4000] [--seed 0]

The text is English-like sentences from a small grammar (seeded): enough structure that a
tiny model's loss falls within a few dozen steps, so "it trained on the data" is measurable.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the teacher", "a small bird", "the farmer", "our neighbour"]
VERBS = ["sees", "likes", "follows", "paints", "finds", "helps", "watches", "remembers"]
OBJECTS = ["the red ball", "a green house", "the river", "an apple tree", "the morning train", "a quiet garden", "the blue boat", "the city lights"]
ENDINGS = ["every day.", "in the evening.", "after lunch.", "near the school.", "with great care.", "before the rain.", "at dawn.", "once again."]


def sentences(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        k = rng.randint(3, 6)
        out.append(" ".join(f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)}" for _ in range(k)))
    return out


def _example(text: str) -> bytes:
    from maxtext.input_pipeline.protos import example_pb2

    e = example_pb2.Example()
    e.features.feature["text"].bytes_list.value.append(text.encode())
    return e.SerializeToString()


def write(out: Path, fmt: str, shards: int, records: int, seed: int) -> list[Path]:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    texts = sentences(rng, records)
    per = -(-records // shards)
    files = []
    for s in range(shards):
        part = texts[s * per : (s + 1) * per]
        if fmt == "arrayrecord":
            from array_record.python.array_record_module import ArrayRecordWriter

            path = out / f"text-train.array_record-{s:05d}-of-{shards:05d}"
            w = ArrayRecordWriter(str(path), "group_size:1")
            for t in part:
                w.write(_example(t))
            w.close()
        elif fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = out / f"text-train-{s:05d}-of-{shards:05d}.parquet"
            pq.write_table(pa.table({"text": part}), str(path))
        else:
            from tensorboardX.record_writer import RecordWriter

            path = out / f"text-train.tfrecord-{s:05d}-of-{shards:05d}"
            w = RecordWriter(str(path))
            for t in part:
                w.write(_example(t))
            w.close()
        files.append(path)
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--format", choices=["arrayrecord", "parquet", "tfrecord"], default="arrayrecord")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for p in write(a.out, a.format, a.shards, a.records, a.seed):
        print(p)


if __name__ == "__main__":
    main()
