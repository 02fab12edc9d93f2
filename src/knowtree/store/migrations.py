"""Append-only schema migrations, tracked with SQLite's `user_version`.

Never edit a released migration: add the next one. Each runs in one transaction.
"""

from __future__ import annotations

import re
import sqlite3

MIGRATIONS: list[str] = [
    # 1: trees, documents, nodes (with FTS5), the LLM cache, the call ledger, runs
    """
    CREATE TABLE trees (
        name TEXT PRIMARY KEY,
        root_id TEXT,
        model TEXT NOT NULL DEFAULT '',
        settings_json TEXT NOT NULL DEFAULT '{}',
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE documents (
        tree TEXT NOT NULL REFERENCES trees(name) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        encoding TEXT NOT NULL,
        chars INTEGER NOT NULL,
        text TEXT NOT NULL,
        added TEXT NOT NULL,
        PRIMARY KEY (tree, path)
    );
    CREATE TABLE nodes (
        tree TEXT NOT NULL REFERENCES trees(name) ON DELETE CASCADE,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        level INTEGER NOT NULL,
        position INTEGER NOT NULL,
        parent TEXT,
        children_json TEXT NOT NULL,
        meta_json TEXT NOT NULL,
        text TEXT NOT NULL DEFAULT '',
        spans_json TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (tree, id)
    );
    CREATE INDEX nodes_parent ON nodes(tree, parent);
    CREATE VIRTUAL TABLE nodes_fts USING fts5(tree UNINDEXED, id UNINDEXED, body);
    CREATE TABLE llm_cache (
        key TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        completion_json TEXT NOT NULL,
        created TEXT NOT NULL
    );
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        tree TEXT,
        detail TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        started TEXT NOT NULL,
        finished TEXT
    );
    CREATE TABLE llm_calls (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT,
        key TEXT NOT NULL,
        model TEXT NOT NULL,
        purpose TEXT NOT NULL,
        cached INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        seconds REAL NOT NULL,
        cost_usd REAL NOT NULL,
        error TEXT,
        created TEXT NOT NULL
    );
    CREATE INDEX llm_calls_run ON llm_calls(run_id);
    """,
    # 2: what a tree holds ('document' trees from files, 'conversation' memories, ...)
    """
    ALTER TABLE trees ADD COLUMN kind TEXT NOT NULL DEFAULT 'document';
    """,
    # 3: conversation memories keep every message verbatim (position, speaker, time, source id)
    """
    CREATE TABLE messages (
        tree TEXT NOT NULL REFERENCES trees(name) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        role TEXT NOT NULL,
        name TEXT,
        content TEXT NOT NULL,
        timestamp TEXT,
        time TEXT,
        session TEXT,
        source_id TEXT,
        attachment TEXT,
        node_id TEXT NOT NULL,
        PRIMARY KEY (tree, position)
    );
    """,
    # 4: documents in a collection: a one-sentence description and metadata (company, year, type...);
    # expert notes (preferences for where to look), per tree or for every tree ('*')
    """
    CREATE TABLE doc_info (
        tree TEXT NOT NULL,
        path TEXT NOT NULL,
        node_id TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        meta_json TEXT NOT NULL DEFAULT '{}',
        pages INTEGER,
        source TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (tree, path)
    );
    CREATE TABLE experts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        scope TEXT NOT NULL,
        text TEXT NOT NULL,
        created TEXT NOT NULL
    );
    CREATE INDEX experts_scope ON experts(scope);
    """,
    # (server) tenants, hashed API keys (read-only flag, revocation), background jobs (builds)
    """
    CREATE TABLE tenants (
        name TEXT PRIMARY KEY,
        created TEXT NOT NULL
    );
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL REFERENCES tenants(name),
        key_hash TEXT NOT NULL UNIQUE,
        label TEXT NOT NULL DEFAULT '',
        read_only INTEGER NOT NULL DEFAULT 0,
        created TEXT NOT NULL,
        revoked_at TEXT
    );
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        kind TEXT NOT NULL,
        tree TEXT NOT NULL,
        params_json TEXT NOT NULL DEFAULT '{}',
        state TEXT NOT NULL,
        progress_json TEXT NOT NULL DEFAULT '{}',
        report_json TEXT,
        error TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE INDEX jobs_state ON jobs(state, created);
    """,
    # runs: the pid and host of the process doing a run (a killed run is then shown 'interrupted')
    """
    ALTER TABLE runs ADD COLUMN pid INTEGER;
    ALTER TABLE runs ADD COLUMN host TEXT;
    """,
    # 5: full-text rows keyed by their node's rowid, so a node's row is replaced by key (a delete by
    # the UNINDEXED tree/id columns scanned the full text of every tree in the database)
    """
    CREATE VIRTUAL TABLE nodes_fts_keyed USING fts5(tree UNINDEXED, id UNINDEXED, body);
    INSERT INTO nodes_fts_keyed(rowid, tree, id, body)
        SELECT n.rowid, f.tree, f.id, f.body FROM nodes_fts f JOIN nodes n ON n.tree = f.tree AND n.id = f.id;
    DROP TABLE nodes_fts;
    ALTER TABLE nodes_fts_keyed RENAME TO nodes_fts;
    """,
    # tree as an index (retrieve/treeindex.py): contextual entries of every node (pieces of leaves and
    # inner nodes) with content hashes, their BM25 rows (FTS rowid = tree_index rowid) and their
    # vectors per embedder (keyed by the hash of the text embedded)
    """
    CREATE TABLE tree_index (
        tree TEXT NOT NULL,
        id TEXT NOT NULL,
        node TEXT NOT NULL,
        parent TEXT,
        leaf INTEGER NOT NULL,
        ord INTEGER NOT NULL,
        hash TEXT NOT NULL,
        body_hash TEXT NOT NULL,
        text TEXT NOT NULL,
        context TEXT NOT NULL,
        cite_json TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (tree, id)
    );
    CREATE VIRTUAL TABLE tree_index_fts USING fts5(
        tree UNINDEXED, id UNINDEXED, body, tokenize = 'porter unicode61 remove_diacritics 2'
    );
    CREATE TABLE tree_index_vec (
        tree TEXT NOT NULL,
        id TEXT NOT NULL,
        embedder TEXT NOT NULL,
        hash TEXT NOT NULL,
        vec BLOB NOT NULL,
        PRIMARY KEY (tree, embedder, id)
    );
    CREATE TABLE tree_index_state (
        tree TEXT PRIMARY KEY,
        signature TEXT NOT NULL,
        entries INTEGER NOT NULL,
        updated TEXT NOT NULL
    );
    """,
    # AutoKB knowledge bases: raw issues (each linked to the KB issue that absorbed it), themes,
    # clusters (centroids, for incremental adds), issue nodes (parents and children) with metadata,
    # solutions and compliance, and the contextualized chunks of the domain documents
    """
    CREATE TABLE kbs (
        name TEXT PRIMARY KEY,
        domain TEXT NOT NULL DEFAULT '',
        attributes_json TEXT NOT NULL,
        rules_json TEXT NOT NULL,
        settings_json TEXT NOT NULL DEFAULT '{}',
        model TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE kb_raw_issues (
        kb TEXT NOT NULL REFERENCES kbs(name) ON DELETE CASCADE,
        id TEXT NOT NULL,
        text TEXT NOT NULL,
        timestamp TEXT,
        cluster_id TEXT,
        issue_id TEXT,
        added TEXT NOT NULL,
        PRIMARY KEY (kb, id)
    );
    CREATE INDEX kb_raw_issue ON kb_raw_issues(kb, issue_id);
    CREATE TABLE kb_themes (
        kb TEXT NOT NULL REFERENCES kbs(name) ON DELETE CASCADE,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        PRIMARY KEY (kb, id)
    );
    CREATE TABLE kb_clusters (
        kb TEXT NOT NULL REFERENCES kbs(name) ON DELETE CASCADE,
        id TEXT NOT NULL,
        theme_id TEXT,
        seed_raw_id TEXT NOT NULL,
        centroid BLOB NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (kb, id)
    );
    CREATE TABLE kb_issues (
        kb TEXT NOT NULL REFERENCES kbs(name) ON DELETE CASCADE,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        parent TEXT,
        cluster_id TEXT NOT NULL,
        position INTEGER NOT NULL DEFAULT 0,
        title TEXT NOT NULL,
        meta_json TEXT NOT NULL,
        solution_json TEXT,
        status TEXT NOT NULL DEFAULT 'pending',
        compliance_json TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (kb, id)
    );
    CREATE INDEX kb_issue_parent ON kb_issues(kb, parent);
    CREATE TABLE kb_chunks (
        kb TEXT NOT NULL REFERENCES kbs(name) ON DELETE CASCADE,
        id TEXT NOT NULL,
        doc_id TEXT NOT NULL,
        source TEXT NOT NULL,
        path_json TEXT NOT NULL,
        text TEXT NOT NULL,
        context TEXT NOT NULL,
        PRIMARY KEY (kb, id)
    );
    """,
    # indexes over passages (retrieve/bm25.py, retrieve/vectors.py) kept in a knowtree database (a
    # knowledge base's, an evaluation's --db): what each named index holds. Before this migration the
    # indexes created these tables themselves, hence IF NOT EXISTS. Each index's own table is created
    # by `create_lexical_index` / `create_vector_index` below.
    """
    CREATE TABLE IF NOT EXISTS lexical_indexes(name TEXT PRIMARY KEY, fingerprint TEXT, passages INTEGER);
    CREATE TABLE IF NOT EXISTS vector_indexes(
        name TEXT PRIMARY KEY, fingerprint TEXT, embedder TEXT, dim INTEGER, passages INTEGER
    );
    """,
    # the tree index's content fingerprint (retrieve/treeindex.py): a hash of the node rows and
    # document lines its entries were derived from, so a save that changed nothing writes no entry
    """
    ALTER TABLE tree_index_state ADD COLUMN content TEXT NOT NULL DEFAULT '';
    """,
    # the tree index's BM25 rows read their text from `tree_index` (an external-content FTS5 table
    # over a generated `body` column: context, newline, text) instead of keeping a second copy of it;
    # `rid` makes the shared rowid explicit (VACUUM keeps an INTEGER PRIMARY KEY, not an implicit rowid);
    # `src`: the key of what a leaf's entries were derived from, so an update skips unchanged leaves
    """
    CREATE TABLE tree_index_rid (
        rid INTEGER PRIMARY KEY,
        tree TEXT NOT NULL,
        id TEXT NOT NULL,
        node TEXT NOT NULL,
        parent TEXT,
        leaf INTEGER NOT NULL,
        ord INTEGER NOT NULL,
        hash TEXT NOT NULL,
        body_hash TEXT NOT NULL,
        text TEXT NOT NULL,
        context TEXT NOT NULL,
        cite_json TEXT NOT NULL DEFAULT '{}',
        src TEXT NOT NULL DEFAULT '',
        body TEXT GENERATED ALWAYS AS (
            CASE WHEN context = '' THEN text ELSE context || char(10) || text END
        ) VIRTUAL,
        UNIQUE (tree, id)
    );
    INSERT INTO tree_index_rid(rid, tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json)
        SELECT rowid, tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json FROM tree_index;
    DROP TABLE tree_index;
    ALTER TABLE tree_index_rid RENAME TO tree_index;
    DROP TABLE tree_index_fts;
    CREATE VIRTUAL TABLE tree_index_fts USING fts5(
        tree UNINDEXED, id UNINDEXED, body, content = 'tree_index', content_rowid = 'rid',
        tokenize = 'porter unicode61 remove_diacritics 2'
    );
    INSERT INTO tree_index_fts(tree_index_fts) VALUES ('rebuild');
    """,
    # branch tenancy: what a run is about, apart from its label (`tree`, e.g. 'kb:acme:hp'): `space`
    # ('tree' or 'kb'), `subject` (the stored name of that tree or knowledge base) and `owner` (the
    # tenant of a `TENANT:NAME` subject, as store/names.py reads it), so a tenant's ledger selects
    # `owner = ?` and no label can pass for a tenant's name (a tenant named 'kb' matched the labels
    # 'kb:TENANT:NAME' of every tenant's knowledge-base runs by prefix). Existing rows: runs of a
    # 'kb-' kind labelled 'kb:NAME' are knowledge-base runs of NAME; every other run is about its label.
    """
    ALTER TABLE runs ADD COLUMN space TEXT NOT NULL DEFAULT 'tree';
    ALTER TABLE runs ADD COLUMN subject TEXT;
    ALTER TABLE runs ADD COLUMN owner TEXT;
    UPDATE runs SET space = 'kb' WHERE substr(kind, 1, 3) = 'kb-' AND substr(tree, 1, 3) = 'kb:';
    UPDATE runs SET subject = CASE WHEN space = 'kb' THEN substr(tree, 4) ELSE tree END;
    UPDATE runs SET owner = CASE
        WHEN instr(subject, ':') BETWEEN 2 AND 33
         AND length(subject) > instr(subject, ':')
         AND instr(substr(subject, instr(subject, ':') + 1), ':') = 0
         AND substr(subject, 1, 1) GLOB '[a-z0-9]'
         AND NOT substr(subject, 1, instr(subject, ':') - 1) GLOB '*[^a-z0-9_-]*'
        THEN substr(subject, 1, instr(subject, ':') - 1) END;
    CREATE INDEX runs_owner ON runs(owner, started);
    """,
    # branch jobs: a running job belongs to one live worker (owner, lease renewed by its heartbeat;
    # another process takes it over only once the lease expired); a request's idempotency key on its
    # job; each message added through the server keeps its add key (the client's message id, the
    # request's idempotency key and index, or its job and index), so a retried or resumed add
    # skips what is stored already
    """
    ALTER TABLE jobs ADD COLUMN owner TEXT;
    ALTER TABLE jobs ADD COLUMN lease_until REAL;
    ALTER TABLE jobs ADD COLUMN idem_key TEXT;
    CREATE INDEX jobs_idem ON jobs(tenant, idem_key) WHERE idem_key IS NOT NULL;
    ALTER TABLE messages ADD COLUMN add_key TEXT;
    CREATE UNIQUE INDEX messages_add_key ON messages(tree, add_key) WHERE add_key IS NOT NULL;
    """,
    # branch scaleidx: how many leaf entries lie below each inner entry of the tree index (`leaves`),
    # so a question's roll-up reads only its candidates' ancestors (retrieve/treesearch.py); every
    # index is marked behind so its next sync writes the counts and the default embedder's vectors
    """
    ALTER TABLE tree_index ADD COLUMN leaves INTEGER NOT NULL DEFAULT 0;
    UPDATE tree_index_state SET signature = '', content = '';
    """,
]

# -- tables made per named index (an index may live in a file of its own, or in memory, where no
# migration runs: these create the registry table too) ----------------------------------------------
INDEX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
LEXICAL_TOKENIZER = "porter unicode61 remove_diacritics 2"


def _table(prefix: str, name: str) -> str:
    if not INDEX_NAME.fullmatch(name):  # callers check first, with a message for the user
        raise ValueError(f"index name {name!r}: use letters, digits and '_' (at most 64)")
    return f"{prefix}_{name}"


def create_lexical_index(conn: sqlite3.Connection, name: str) -> str:
    """Create (if missing) the FTS5 table of the lexical index `name`, and `lexical_indexes`;
    returns the table's name."""
    table = _table("lex", name)
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5("
        f"pid UNINDEXED, doc UNINDEXED, body, meta UNINDEXED, tokenize = '{LEXICAL_TOKENIZER}')"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS lexical_indexes(name TEXT PRIMARY KEY, fingerprint TEXT, passages INTEGER)"
    )
    return table


def create_vector_index(conn: sqlite3.Connection, name: str) -> str:
    """Create (if missing) the vector table of the index `name`, and `vector_indexes`; returns the
    table's name."""
    table = _table("vec", name)
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {table}("
        "pid TEXT PRIMARY KEY, doc TEXT NOT NULL, embedder TEXT NOT NULL, vec BLOB NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS vector_indexes("
        "name TEXT PRIMARY KEY, fingerprint TEXT, embedder TEXT, dim INTEGER, passages INTEGER)"
    )
    return table


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to the latest schema; returns the version it is at."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        from knowtree.errors import StoreError

        raise StoreError(
            f"database schema version {version} is newer than this knowtree ({len(MIGRATIONS)}): upgrade knowtree"
        )
    for number in range(version + 1, len(MIGRATIONS) + 1):
        script = MIGRATIONS[number - 1]
        conn.execute("BEGIN")
        try:
            for statement in _split(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except Exception:
            conn.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)


def _split(script: str) -> list[str]:
    # our migrations hold no semicolons inside strings or triggers, so a plain split is exact
    return [s.strip() for s in script.split(";") if s.strip()]
