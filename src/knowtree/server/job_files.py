"""What a job leaves on disk and shows its tenant: its uploaded files go when it ends, upload folders no
job needs are swept at start, and its errors and reports name files as the tenant knows them (no path
of the server's)."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.server.jobs import Job, JobStore
from knowtree.store.dialect import is_url
from knowtree.store.postgres import redact

if TYPE_CHECKING:
    from knowtree.core import KnowTree


class JobFiles:
    """Mixed into `Service`: needs its `kt`, `jobs` and `upload_root()`."""

    kt: KnowTree
    jobs: JobStore

    def upload_root(self) -> Path:
        raise NotImplementedError

    def job_ended(self, job: Job) -> None:
        """A job is done, failed or cancelled (queued or running): its uploaded files go. A job the
        server stopped while shutting down is not ended (it resumes at the next start, and keeps them)."""
        uploads = job.params.get("uploads")
        if not uploads:
            return
        path, root = Path(uploads).resolve(), self.upload_root().resolve()
        if path.parent == root:  # only a folder save_uploads made, whatever the stored parameter says
            shutil.rmtree(path, ignore_errors=True)

    def sweep_uploads(self, older_than: float = 3600.0) -> int:
        """Remove the upload folders no queued or running job needs, older than `older_than` seconds
        (a younger one may be a request's still being saved): those of jobs that ended before their
        uploads were removed with them. Returns how many went."""
        root = self.upload_root()
        if not root.is_dir():
            return 0
        keep = {Path(p).name for p in self.jobs.unfinished_uploads()}
        removed = 0
        for entry in root.iterdir():
            if (re.fullmatch(r"[0-9a-f]{32}", entry.name) and entry.is_dir() and entry.name not in keep
                    and time.time() - entry.stat().st_mtime > older_than):
                shutil.rmtree(entry, ignore_errors=True)
                removed += 1
        return removed

    def tenant_text(self, job: Job, text: str) -> str:
        """`text` (a job's error or a report's string) as its tenant may read it: an uploaded file by
        the name it was uploaded as, no upload folder, database or database folder of the server's."""
        uploads = job.params.get("uploads")
        if uploads:
            text = text.replace(str(uploads).rstrip("/") + "/", "")
        root = str(self.upload_root().resolve())
        text = re.sub(re.escape(root) + r"/[0-9a-f]{32}/", "", text)
        db = self.kt.settings.db
        if is_url(db):
            text = text.replace(db, "the database").replace(redact(db), "the database")
        elif db != ":memory:":
            full = Path(db).resolve()
            text = text.replace(str(full), "the database").replace(str(full.parent) + "/", "")
        return text

    def tenant_report(self, job: Job, value: Any) -> Any:
        """A job's report with `tenant_text` applied to every string in it."""
        if isinstance(value, str):
            return self.tenant_text(job, value)
        if isinstance(value, dict):
            return {k: self.tenant_report(job, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.tenant_report(job, v) for v in value]
        return value

