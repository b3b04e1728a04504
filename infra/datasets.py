"""Training datasets a spec declares: where the files are, what format MaxText reads them in, which tokenizer.

A dataset lives under a prefix of one of the spec's data buckets. Runs name it (``--dataset``
or a recipe's ``dataset:``); the run mounts the bucket read-only through the GCS FUSE CSI
driver and points MaxText's Grain input pipeline at the files under the mount.

Every format here is read by MaxText's Grain pipeline (``dataset_type=grain``,
``grain_file_type=<format>``): Grain is in MaxText's own pinned environment, so the local
rehearsal reads the same files with the same reader a run does. (MaxText's ``tfds`` pipeline
needs tensorflow-datasets, which the pinned MaxText does not install; TFRecord files are read
through Grain instead.)
"""

from __future__ import annotations

import re
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from toolkit.names import DNS1035_LABEL

# A path inside a bucket the toolkit writes into a mount path and a MaxText flag: plain
# segments only (no '..', no leading '/', no glob or shell characters).
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._=+-]*"
OBJECT_PREFIX = rf"^{_SEGMENT}(/{_SEGMENT})*$"
# The file pattern under the prefix: one glob in the last segment at most (Grain expands it).
FILE_GLOB = r"^[A-Za-z0-9._=+*?-]+$"
CHAT_TEMPLATE_MAX = 64 * 1024  # a chat template is a page of Jinja; it travels as one program argument
# MaxText's bundled tokenizers, named as its configs name them (relative to the package).
MAXTEXT_ASSET = r"^assets/tokenizers/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)?$"


class DatasetFormat(str, Enum):
    ARRAYRECORD = "arrayrecord"
    PARQUET = "parquet"
    TFRECORD = "tfrecord"

    @property
    def default_files(self) -> str:
        return {"arrayrecord": "*.array_record*", "parquet": "*.parquet", "tfrecord": "*.tfrecord*"}[self.value]


class TokenizerType(str, Enum):
    SENTENCEPIECE = "sentencepiece"
    HUGGINGFACE = "huggingface"
    TIKTOKEN = "tiktoken"


class DatasetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=DNS1035_LABEL, max_length=40, description="what a run names (--dataset, a recipe's dataset:)")
    bucket: str = Field(..., description="one of the spec's buckets with purpose data")
    path: str = Field(..., max_length=512, description="the dataset's prefix in the bucket, e.g. c4/en/3.0.1")
    format: DatasetFormat = Field(..., description="file format, read by MaxText's Grain pipeline (grain_file_type)")
    files: str | None = Field(None, pattern=FILE_GLOB, max_length=200, description="training files under path (default per format, e.g. *.array_record*)")
    tokenizer: str = Field(
        "assets/tokenizers/tokenizer.llama2",
        max_length=512,
        description="a MaxText bundled tokenizer (assets/tokenizers/...) or a file under the dataset's path (e.g. tokenizer.model)",
    )
    tokenizer_type: TokenizerType = TokenizerType.SENTENCEPIECE
    column: str = Field(
        "text", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64, description="the feature holding the text (or the token ids when tokenized)"
    )
    tokenized: bool = Field(False, description="the files hold token ids already (MaxText tokenize_train_data=false)")
    chat_template: str | None = Field(
        None,
        max_length=CHAT_TEMPLATE_MAX,
        description="for fine-tuning (a recipe of kind sft): the Jinja chat template that renders each conversation of the column "
        "(MaxText's chat_template); none: the Hugging Face tokenizer's own",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not re.fullmatch(OBJECT_PREFIX, v):
            raise ValueError(
                f"{v!r} is not a plain object prefix; write it like c4/en/3.0.1 (segments of letters, digits, . _ = + -, no '..', no leading or trailing /)"
            )
        return v

    @field_validator("chat_template")
    @classmethod
    def _chat_template(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.strip():
            raise ValueError("is empty; leave it out to use the tokenizer's own chat template")
        if "${" in v:
            # MaxText reads its arguments with OmegaConf, which would take ${...} for one of its interpolations.
            raise ValueError("holds '${', which MaxText's config loader (OmegaConf) reads as an interpolation; write the template without it")
        if "\x00" in v:
            raise ValueError("holds a NUL character, which no program argument can carry")
        return v

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, v: str) -> str:
        if v.startswith("assets/"):
            if not re.fullmatch(MAXTEXT_ASSET, v):
                raise ValueError(f"{v!r} is not one of MaxText's bundled tokenizers; write it like assets/tokenizers/tokenizer.llama2")
        elif not re.fullmatch(OBJECT_PREFIX, v):
            raise ValueError(f"{v!r} is neither assets/tokenizers/<name> nor a file under the dataset's path; write it like tokenizer.model")
        return v

    @property
    def file_glob(self) -> str:
        return self.files or self.format.default_files

    @property
    def bundled_tokenizer(self) -> bool:
        """The tokenizer ships with MaxText (else it is a file in the bucket, beside the data)."""
        return self.tokenizer.startswith("assets/")

    def object_prefix(self) -> str:
        """The prefix of the dataset's objects, ending in '/'."""
        return self.path.rstrip("/") + "/"
