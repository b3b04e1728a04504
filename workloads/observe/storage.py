"""Cloud Storage: uploads, and the calls the run service makes (a run's identity, cleanup's listings).

``google-cloud-storage`` is imported lazily, and every client is built on the bounded
transport of ``workloads.observe.google_http`` (a deadline, a byte cap and a page cap per
request; an unreachable or misbehaving server is one line naming Cloud Storage, exit 3).
With ``STORAGE_EMULATOR_HOST`` set (tests, a local emulator) the client talks to that
endpoint with anonymous credentials, so no Google credentials are looked up; otherwise
Application Default Credentials are used as usual.
"""

from __future__ import annotations

import mimetypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"

# mimetypes does not know every type a report holds, and its answers vary by platform.
_CONTENT_TYPES = {
    ".md": "text/markdown; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".log": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".png": "image/png",
    ".csv": "text/csv; charset=utf-8",
    ".html": "text/html; charset=utf-8",
}


class StorageError(ToolkitError):
    """An upload failed: bucket missing, no credentials, or no access."""

    exit_code = 1


@dataclass(frozen=True)
class Uploaded:
    uri: str  # gs://bucket/prefix/file
    content_type: str
    size: int


def content_type_for(path: Path) -> str:
    return _CONTENT_TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def make_client(project: str | None = None, *, endpoint: str | None = None) -> Any:
    """A storage.Client over the bounded transport (``workloads.observe.google_http``); anonymous against an
    emulator (``endpoint``, else $STORAGE_EMULATOR_HOST), Application Default Credentials otherwise."""
    from workloads.observe import google_http

    if endpoint:
        return google_http.storage_client(project or "emulator", google_http.anonymous(), endpoint=endpoint)
    if os.environ.get(EMULATOR_ENV):  # the library reads the variable for the endpoint itself
        return google_http.storage_client(project or "emulator", google_http.anonymous())
    try:
        credentials, found = google_http.default_credentials()
    except Exception as e:  # google.auth.exceptions.DefaultCredentialsError and friends
        raise StorageError(f"no Google credentials for Cloud Storage ({' '.join(str(e).split())[:120]}) — run gcloud auth application-default login") from None
    return google_http.storage_client(project or found, credentials)


def storage_call(what: str, bucket: str, fn: Any) -> Any:
    """``fn()``, its failure one line (a missing bucket, no permission, no connection)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    try:
        return fn()
    except auth_exc.GoogleAuthError as e:
        raise StorageError(
            f"cannot {what}: no usable Google credentials ({' '.join(str(e).split())[:120]}) — run gcloud auth application-default login"
        ) from None
    except gexc.NotFound:
        raise StorageError(f"cannot {what}: bucket gs://{bucket} does not exist — create it (python -m infra deploy) or fix the spec's buckets") from None
    except gexc.Forbidden as e:
        raise StorageError(f"cannot {what}: no permission ({' '.join(str(e).split())[:160]})") from None
    except gexc.PreconditionFailed:
        raise StorageError(f"cannot {what}: another writer got there first — run the command again") from None
    except gexc.GoogleAPICallError as e:
        raise StorageError(f"cannot {what}: {' '.join(str(e).split())[:160]}") from None
    except OSError as e:  # connection refused to an emulator, DNS, ...
        raise StorageError(f"cannot {what}: Cloud Storage unreachable ({os.environ.get(EMULATOR_ENV) or 'storage.googleapis.com'}): {e}") from None


def upload(report_dir: Path, bucket: str, prefix: str, *, files: list[Path] | None = None, client: Any = None, project: str | None = None) -> list[Uploaded]:
    """Upload ``files`` (default: every file under ``report_dir``) to gs://bucket/prefix/<path relative to report_dir>, each a new object.

    ``report --upload`` passes the report's own files: whatever else the user keeps in the
    directory is not theirs to publish. Nothing is replaced (``ifGenerationMatch=0``)."""
    report_dir = Path(report_dir)
    if not report_dir.is_dir():
        raise StorageError(f"{report_dir} is not a directory — write the report first (report --out DIR)")
    if files is None:
        from toolkit import owned

        files = [p for p in report_dir.rglob("*") if p.is_file() and p.name not in (owned.MANIFEST, owned.LOCK)]
    files = sorted(files)
    if not files:
        raise StorageError(f"{report_dir} is empty; nothing to upload")
    client = client or make_client(project)
    prefix = prefix.strip("/")
    from google.api_core import exceptions as gexc

    out: list[Uploaded] = []
    b = client.bucket(bucket)
    for f in files:
        name = "/".join(x for x in (prefix, f.relative_to(report_dir).as_posix()) if x)
        ctype = content_type_for(f)
        try:
            # Create-only: an upload never replaces an object, another run's report least of all (toolkit.ledger).
            b.blob(name).upload_from_filename(str(f), content_type=ctype, if_generation_match=0)
        except gexc.PreconditionFailed:
            raise StorageError(f"gs://{bucket}/{name} already exists, and an upload never replaces an object — upload under another prefix") from None
        except gexc.NotFound:
            raise StorageError(f"bucket gs://{bucket} does not exist — create it (python -m infra deploy) or fix buckets[purpose=artifacts]") from None
        except gexc.Forbidden as e:
            raise StorageError(f"no permission to write gs://{bucket}/{name}: {' '.join(str(e).split())[:160]}") from None
        except gexc.GoogleAPICallError as e:
            raise StorageError(f"upload of gs://{bucket}/{name} failed: {' '.join(str(e).split())[:160]}") from None
        except OSError as e:  # connection refused to an emulator, DNS, ...
            raise StorageError(f"cannot reach Cloud Storage ({os.environ.get(EMULATOR_ENV) or 'storage.googleapis.com'}): {e}") from None
        out.append(Uploaded(uri=f"gs://{bucket}/{name}", content_type=ctype, size=f.stat().st_size))
    return out
