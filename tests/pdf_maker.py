"""Small PDFs for tests, written by hand (Helvetica text, one line per text operator): no test
depends on shared data. Outlines and encryption are added with pypdf's writer."""

from __future__ import annotations

from pathlib import Path


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(path: Path, pages: list[list[str]]) -> Path:
    """A PDF whose page i shows the lines pages[i], top to bottom."""
    objects: list[bytes] = []
    n = len(pages)
    # 1 catalog, 2 pages, 3 font, then (page, content) pairs
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, lines in enumerate(pages):
        ops = ["BT", "/F1 11 Tf", "14 TL", "50 760 Td"]
        for line in lines:
            ops.append(f"({_escape(line)}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
            f" /Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for k, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{k} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))
    return path


def with_outline(src: Path, dst: Path, items: list[tuple[str, int, int]]) -> Path:
    """Copy of src with bookmarks (title, level 1|2, 0-based page)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(str(src)))
    parent = None
    for title, level, page in items:
        if level == 1:
            parent = writer.add_outline_item(title=title, page_number=page)
        else:
            writer.add_outline_item(title=title, page_number=page, parent=parent)
    with open(dst, "wb") as f:
        writer.write(f)
    return dst


def encrypted(src: Path, dst: Path, password: str = "secret") -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(str(src)))
    writer.encrypt(password, algorithm="RC4-128")
    with open(dst, "wb") as f:
        writer.write(f)
    return dst


def filler(topic: str, n: int) -> list[str]:
    return [f"This line {i} is about the {topic} and nothing else of note." for i in range(n)]
