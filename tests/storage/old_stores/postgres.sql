CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE agentcore_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    PRIMARY KEY (version)
);
CREATE TABLE organizations (
    id text NOT NULL,
    name text NOT NULL,
    created_at text NOT NULL,
    PRIMARY KEY (id),
    UNIQUE (name)
);
CREATE TABLE api_keys (
    id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    scopes text NOT NULL,
    digest text NOT NULL,
    prefix text NOT NULL,
    last4 text NOT NULL,
    name text,
    created_at text NOT NULL,
    expires_at text,
    revoked_at text,
    last_used_at text,
    rotated_from text,
    CHECK ((environment = ANY (ARRAY['test'::text, 'live'::text]))),
    PRIMARY KEY (id),
    UNIQUE (digest)
);
CREATE TABLE agents (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    name text NOT NULL,
    role text NOT NULL,
    status text NOT NULL,
    system_prompt text NOT NULL,
    tools text NOT NULL,
    model text,
    handoff_on_no_answer integer DEFAULT 0 NOT NULL,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (seq),
    UNIQUE (id)
);
CREATE TABLE documents (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    source text NOT NULL,
    content_type text NOT NULL,
    pages integer NOT NULL,
    chunks integer NOT NULL,
    bytes bigint NOT NULL,
    created_at text NOT NULL,
    status text DEFAULT 'ready'::text NOT NULL,
    last_error text,
    PRIMARY KEY (seq),
    UNIQUE (id)
);
CREATE TABLE chunks (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    document_id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    ordinal integer NOT NULL,
    text text NOT NULL,
    pages text NOT NULL,
    page_offsets text DEFAULT '[]'::text NOT NULL,
    PRIMARY KEY (id)
);
CREATE TABLE vector_segments (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    document_id text,
    embedder text NOT NULL,
    dimension integer NOT NULL,
    count integer NOT NULL,
    ids bytea NOT NULL,
    vectors bytea NOT NULL,
    version bigint DEFAULT 0 NOT NULL,
    PRIMARY KEY (id)
);
ALTER TABLE vector_segments ALTER COLUMN ids SET STORAGE EXTERNAL;
ALTER TABLE vector_segments ALTER COLUMN vectors SET STORAGE EXTERNAL;
CREATE TABLE knowledge_state (
    organization_id text NOT NULL,
    environment text NOT NULL,
    embedder text,
    dimension integer,
    version bigint DEFAULT 0 NOT NULL,
    log_floor bigint DEFAULT 0 NOT NULL,
    index_dtype text,
    PRIMARY KEY (organization_id, environment)
);
CREATE TABLE events (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    type text NOT NULL,
    timestamp text NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (seq),
    UNIQUE (id)
);
CREATE TABLE webhook_subscriptions (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    url text NOT NULL,
    events text NOT NULL,
    status text NOT NULL,
    secret text NOT NULL,
    description text,
    previous_secret text,
    previous_secret_expires_at double precision,
    failing_since double precision,
    disabled_reason text,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (seq),
    UNIQUE (id)
);
CREATE TABLE webhook_deliveries (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text NOT NULL,
    event_id text NOT NULL,
    subscription_id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    status text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at double precision,
    leased_until double precision,
    last_status_code integer,
    last_error text,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (seq),
    UNIQUE (id)
);
CREATE TABLE webhook_attempts (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    delivery_id text NOT NULL,
    subscription_id text NOT NULL,
    attempted_at text NOT NULL,
    status_code integer,
    error text,
    duration_ms double precision NOT NULL,
    PRIMARY KEY (seq)
);
CREATE TABLE conversations (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    agent_id text NOT NULL,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (seq),
    UNIQUE (id)
);
CREATE TABLE messages (
    seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    conversation_id text NOT NULL,
    role text NOT NULL,
    content text NOT NULL,
    citations text DEFAULT '[]'::text NOT NULL,
    created_at text NOT NULL,
    PRIMARY KEY (seq)
);
CREATE TABLE idempotency_keys (
    organization_id text NOT NULL,
    environment text NOT NULL,
    key text NOT NULL,
    fingerprint text NOT NULL,
    status text NOT NULL,
    response_status integer,
    response_body bytea,
    response_headers text,
    created_at double precision NOT NULL,
    PRIMARY KEY (organization_id, environment, key)
);
CREATE TABLE knowledge_tombstones (
    organization_id text NOT NULL,
    environment text NOT NULL,
    version bigint NOT NULL,
    ids bytea NOT NULL
);
CREATE TABLE rate_limit_buckets (
    key_id text NOT NULL,
    tokens double precision NOT NULL,
    updated_at double precision NOT NULL,
    allowed boolean NOT NULL,
    PRIMARY KEY (key_id)
);
CREATE TABLE ingest_jobs (
    document_id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    kind text NOT NULL,
    filename text NOT NULL,
    content_type text,
    data bytea NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    leased_until double precision,
    created_at double precision NOT NULL,
    PRIMARY KEY (document_id)
);
ALTER TABLE ingest_jobs ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE term_counts (
    document_id text NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    term text NOT NULL,
    sentences integer NOT NULL,
    PRIMARY KEY (document_id, term)
);
CREATE TABLE vector_rows (
    chunk_id bigint NOT NULL,
    organization_id text NOT NULL,
    environment text NOT NULL,
    document_id text,
    dimension integer NOT NULL,
    embedding halfvec NOT NULL,
    exact bytea NOT NULL,
    PRIMARY KEY (chunk_id)
);
ALTER TABLE vector_rows ALTER COLUMN embedding SET STORAGE EXTERNAL;
CREATE INDEX api_keys_org ON api_keys USING btree (organization_id);
CREATE INDEX agents_workspace ON agents USING btree (organization_id, environment, seq);
CREATE INDEX documents_workspace ON documents USING btree (organization_id, environment, seq);
CREATE INDEX chunks_document ON chunks USING btree (document_id);
CREATE INDEX chunks_workspace ON chunks USING btree (organization_id, environment);
CREATE INDEX vector_segments_version ON vector_segments USING btree (organization_id, environment, version);
CREATE INDEX vector_segments_workspace ON vector_segments USING btree (organization_id, environment, document_id);
CREATE INDEX events_workspace ON events USING btree (organization_id, environment, seq);
CREATE INDEX webhook_subscriptions_workspace ON webhook_subscriptions USING btree (organization_id, environment, seq);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries USING btree (next_attempt_at) WHERE (status = 'pending'::text);
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries USING btree (subscription_id, seq);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts USING btree (delivery_id, seq);
CREATE INDEX conversations_workspace ON conversations USING btree (organization_id, environment);
CREATE INDEX messages_conversation ON messages USING btree (conversation_id, seq);
CREATE INDEX knowledge_tombstones_version ON knowledge_tombstones USING btree (organization_id, environment, version);
CREATE INDEX ingest_jobs_lease ON ingest_jobs USING btree (created_at);
CREATE INDEX term_counts_term ON term_counts USING btree (organization_id, environment, term);
CREATE INDEX vector_rows_workspace ON vector_rows USING btree (organization_id, environment, document_id);
ALTER TABLE api_keys ADD FOREIGN KEY (organization_id) REFERENCES organizations(id);
ALTER TABLE agents ADD FOREIGN KEY (organization_id) REFERENCES organizations(id);
ALTER TABLE chunks ADD FOREIGN KEY (document_id) REFERENCES documents(id) ON DELETE CASCADE;
ALTER TABLE messages ADD FOREIGN KEY (conversation_id) REFERENCES conversations(id);
ALTER TABLE ingest_jobs ADD FOREIGN KEY (document_id) REFERENCES documents(id) ON DELETE CASCADE;
ALTER TABLE term_counts ADD FOREIGN KEY (document_id) REFERENCES documents(id) ON DELETE CASCADE;
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (1, 'tenancy_and_agents', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (2, 'knowledge', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (3, 'events_and_webhooks', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (4, 'chat_and_idempotency', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (5, 'knowledge_change_log', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (6, 'rate_limit_buckets', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (7, 'document_status_and_ingest_jobs', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (8, 'term_counts', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "agentcore_migrations" ("version", "name", "applied_at") OVERRIDING SYSTEM VALUE VALUES (9, 'workspace_index_dtype', '2026-11-25 22:16:58.323697+00:00'::timestamptz);
INSERT INTO "organizations" ("id", "name", "created_at") OVERRIDING SYSTEM VALUE VALUES ('org_iCQW9vGwwRHE9QLnqcxMIHOG', 'acme', '2026-11-25T22:16:58.369Z');
INSERT INTO "api_keys" ("id", "organization_id", "environment", "scopes", "digest", "prefix", "last4", "name", "created_at", "expires_at", "revoked_at", "last_used_at", "rotated_from") OVERRIDING SYSTEM VALUE VALUES ('key_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', '["read", "write"]', 'digest-0', 'ak_test_', 'abc0', 'ci', '2026-01-02T03:04:05.000Z', NULL, NULL, '2026-01-03T00:00:00.000Z', NULL);
INSERT INTO "api_keys" ("id", "organization_id", "environment", "scopes", "digest", "prefix", "last4", "name", "created_at", "expires_at", "revoked_at", "last_used_at", "rotated_from") OVERRIDING SYSTEM VALUE VALUES ('key_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', '["read"]', 'digest-1', 'ak_test_', 'abc1', NULL, '2026-01-02T03:04:05.000Z', NULL, '2026-01-04T00:00:00.000Z', NULL, NULL);
INSERT INTO "agents" ("seq", "id", "organization_id", "environment", "name", "role", "status", "system_prompt", "tools", "model", "handoff_on_no_answer", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (1, 'agt_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'Agent 0', 'support', 'draft', 'Be kind.', '[{"name": "lookup", "description": "d", "parameters": {"type": "object"}}]', NULL, 0, '2026-01-02T03:04:05Z', '2026-01-02T03:04:05Z');
INSERT INTO "agents" ("seq", "id", "organization_id", "environment", "name", "role", "status", "system_prompt", "tools", "model", "handoff_on_no_answer", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (2, 'agt_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'Agent 1', 'support', 'deployed', 'Be kind.', '[{"name": "lookup", "description": "d", "parameters": {"type": "object"}}]', 'extractive', 1, '2026-01-02T03:04:05Z', '2026-01-02T03:04:05Z');
INSERT INTO "agents" ("seq", "id", "organization_id", "environment", "name", "role", "status", "system_prompt", "tools", "model", "handoff_on_no_answer", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (3, 'agt_old2', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'Agent 2', 'support', 'archived', 'Be kind.', '[{"name": "lookup", "description": "d", "parameters": {"type": "object"}}]', 'extractive', 0, '2026-01-02T03:04:05Z', '2026-01-02T03:04:05Z');
SELECT setval(pg_get_serial_sequence('agents', 'seq'), (SELECT MAX(seq) FROM agents));
INSERT INTO "documents" ("seq", "id", "organization_id", "environment", "source", "content_type", "pages", "chunks", "bytes", "created_at", "status", "last_error") OVERRIDING SYSTEM VALUE VALUES (1, 'doc_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'file0.txt', 'text/plain', 2, 3, 1000, '2026-01-02T03:04:05.000Z', 'ready', NULL);
INSERT INTO "documents" ("seq", "id", "organization_id", "environment", "source", "content_type", "pages", "chunks", "bytes", "created_at", "status", "last_error") OVERRIDING SYSTEM VALUE VALUES (2, 'doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'file1.txt', 'text/plain', 2, 3, 1001, '2026-01-02T03:04:05.000Z', 'ready', NULL);
INSERT INTO "documents" ("seq", "id", "organization_id", "environment", "source", "content_type", "pages", "chunks", "bytes", "created_at", "status", "last_error") OVERRIDING SYSTEM VALUE VALUES (4, 'doc_old3', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'file3.txt', 'text/plain', 2, 0, 1003, '2026-01-02T03:04:05.000Z', 'processing', NULL);
INSERT INTO "documents" ("seq", "id", "organization_id", "environment", "source", "content_type", "pages", "chunks", "bytes", "created_at", "status", "last_error") OVERRIDING SYSTEM VALUE VALUES (5, 'doc_old4', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'file4.txt', 'text/plain', 2, 0, 1004, '2026-01-02T03:04:05.000Z', 'failed', '{"type":"about:blank","title":"Bad","status":422,"detail":"no","code":"no_text","param":null,"request_id":null}');
SELECT setval(pg_get_serial_sequence('documents', 'seq'), (SELECT MAX(seq) FROM documents));
INSERT INTO "chunks" ("id", "document_id", "organization_id", "environment", "ordinal", "text", "pages", "page_offsets") OVERRIDING SYSTEM VALUE VALUES (1, 'doc_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 0, 'text 0.0', '[1]', '[0]');
INSERT INTO "chunks" ("id", "document_id", "organization_id", "environment", "ordinal", "text", "pages", "page_offsets") OVERRIDING SYSTEM VALUE VALUES (2, 'doc_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 1, 'text 0.1', '[1, 2]', '[0, 5]');
INSERT INTO "chunks" ("id", "document_id", "organization_id", "environment", "ordinal", "text", "pages", "page_offsets") OVERRIDING SYSTEM VALUE VALUES (3, 'doc_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 2, 'text 0.2', '[1, 2]', '[0, 5]');
INSERT INTO "chunks" ("id", "document_id", "organization_id", "environment", "ordinal", "text", "pages", "page_offsets") OVERRIDING SYSTEM VALUE VALUES (4, 'doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 0, 'text 1.0', '[1]', '[0]');
INSERT INTO "chunks" ("id", "document_id", "organization_id", "environment", "ordinal", "text", "pages", "page_offsets") OVERRIDING SYSTEM VALUE VALUES (5, 'doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 1, 'text 1.1', '[1, 2]', '[0, 5]');
INSERT INTO "chunks" ("id", "document_id", "organization_id", "environment", "ordinal", "text", "pages", "page_offsets") OVERRIDING SYSTEM VALUE VALUES (6, 'doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 2, 'text 1.2', '[1, 2]', '[0, 5]');
SELECT setval(pg_get_serial_sequence('chunks', 'id'), (SELECT MAX(id) FROM chunks));
INSERT INTO "vector_segments" ("id", "organization_id", "environment", "document_id", "embedder", "dimension", "count", "ids", "vectors", "version") OVERRIDING SYSTEM VALUE VALUES (1, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old0', 'hashing-v1', 8, 3, '\x010000000000000002000000000000000300000000000000'::bytea, '\x004f223a03f9193e3b4a0dbe2181e5be10566abecb8bffbe9ffbf73c96af2c3f2d31a4bef8facebe4267a33e7a1a6e3e6ea88c3dcb311bbf7f209cbc1df1e73eb047c3beb2f504be7b190abf3e56bbbe4dc705bf679c88bdaa20b8be91a19d3d'::bytea, 1);
INSERT INTO "vector_segments" ("id", "organization_id", "environment", "document_id", "embedder", "dimension", "count", "ids", "vectors", "version") OVERRIDING SYSTEM VALUE VALUES (2, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old1', 'hashing-v1', 8, 2, '\x04000000000000000600000000000000'::bytea, '\xf2e4523da27f7bbd23a153bfc93035bed98182bc6a72183d89aa00bf82b120be9d41313de3b1cc3c27b9f5be5c5bf43cfb46083f042a1bbf4660ac3e7e853f3d'::bytea, 2);
INSERT INTO "vector_segments" ("id", "organization_id", "environment", "document_id", "embedder", "dimension", "count", "ids", "vectors", "version") OVERRIDING SYSTEM VALUE VALUES (4, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old1', 'hashing-v1', 8, 1, '\x0500000000000000'::bytea, '\x9a24edbe5e3ec7bddee5a03fc67c303f8488a7befbb5bcbe9d1980be0303c33f'::bytea, 5);
SELECT setval(pg_get_serial_sequence('vector_segments', 'id'), (SELECT MAX(id) FROM vector_segments));
INSERT INTO "knowledge_state" ("organization_id", "environment", "embedder", "dimension", "version", "log_floor", "index_dtype") OVERRIDING SYSTEM VALUE VALUES ('org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'hashing-v1', 8, 5, 0, 'float32');
INSERT INTO "events" ("seq", "id", "organization_id", "environment", "type", "timestamp", "data") OVERRIDING SYSTEM VALUE VALUES (1, 'evt_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'agent.action', '2026-01-02T03:04:05Z', '{"n":0,"nested":{"a":[1,2]}}');
INSERT INTO "events" ("seq", "id", "organization_id", "environment", "type", "timestamp", "data") OVERRIDING SYSTEM VALUE VALUES (2, 'evt_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'agent.action', '2026-01-02T03:04:05Z', '{"n":1,"nested":{"a":[1,2]}}');
SELECT setval(pg_get_serial_sequence('events', 'seq'), (SELECT MAX(seq) FROM events));
INSERT INTO "webhook_subscriptions" ("seq", "id", "organization_id", "environment", "url", "events", "status", "secret", "description", "previous_secret", "previous_secret_expires_at", "failing_since", "disabled_reason", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (1, 'whk_MbjKEglRuDwykD75lMijt1lT', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'https://example.com/h', '["agent.action"]', 'active', 'whsec_a', 'd', NULL, NULL, 2000.5, NULL, '2026-11-25T22:16:58.397Z', '2026-11-25T22:16:58.397Z');
INSERT INTO "webhook_subscriptions" ("seq", "id", "organization_id", "environment", "url", "events", "status", "secret", "description", "previous_secret", "previous_secret_expires_at", "failing_since", "disabled_reason", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (2, 'whk_0KDCWgPOgUe3NU2T9QXKU17R', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'https://example.com/h', '["agent.action", "agent.error"]', 'active', 'whsec_a', 'd', 'whsec_0', 5000.0, NULL, NULL, '2026-11-25T22:16:58.398Z', '2026-11-25T22:16:58.399Z');
SELECT setval(pg_get_serial_sequence('webhook_subscriptions', 'seq'), (SELECT MAX(seq) FROM webhook_subscriptions));
INSERT INTO "webhook_deliveries" ("seq", "id", "event_id", "subscription_id", "organization_id", "environment", "status", "attempts", "next_attempt_at", "leased_until", "last_status_code", "last_error", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (1, 'dlv_oxKiUHasD5aZWVczIbva6QX8', 'evt_old0', 'whk_MbjKEglRuDwykD75lMijt1lT', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'pending', 1, 2100.0, NULL, 500, 'boom', '2026-11-25T22:16:58.400Z', '2026-11-25T22:16:58.404Z');
INSERT INTO "webhook_deliveries" ("seq", "id", "event_id", "subscription_id", "organization_id", "environment", "status", "attempts", "next_attempt_at", "leased_until", "last_status_code", "last_error", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (2, 'dlv_2lnOFHFruqr909hBIhZrQVr2', 'evt_old0', 'whk_0KDCWgPOgUe3NU2T9QXKU17R', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'pending', 0, 2000.0, NULL, NULL, NULL, '2026-11-25T22:16:58.400Z', '2026-11-25T22:16:58.400Z');
INSERT INTO "webhook_deliveries" ("seq", "id", "event_id", "subscription_id", "organization_id", "environment", "status", "attempts", "next_attempt_at", "leased_until", "last_status_code", "last_error", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (3, 'dlv_T5VZAGHbmQACopDRqyqdkI07', 'evt_old1', 'whk_MbjKEglRuDwykD75lMijt1lT', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'pending', 0, 2001.0, NULL, NULL, NULL, '2026-11-25T22:16:58.401Z', '2026-11-25T22:16:58.401Z');
INSERT INTO "webhook_deliveries" ("seq", "id", "event_id", "subscription_id", "organization_id", "environment", "status", "attempts", "next_attempt_at", "leased_until", "last_status_code", "last_error", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (4, 'dlv_BK336VxtWAArnuzFw1VrUvKz', 'evt_old1', 'whk_0KDCWgPOgUe3NU2T9QXKU17R', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'pending', 0, 2001.0, NULL, NULL, NULL, '2026-11-25T22:16:58.401Z', '2026-11-25T22:16:58.401Z');
SELECT setval(pg_get_serial_sequence('webhook_deliveries', 'seq'), (SELECT MAX(seq) FROM webhook_deliveries));
INSERT INTO "webhook_attempts" ("seq", "delivery_id", "subscription_id", "attempted_at", "status_code", "error", "duration_ms") OVERRIDING SYSTEM VALUE VALUES (1, 'dlv_oxKiUHasD5aZWVczIbva6QX8', 'whk_MbjKEglRuDwykD75lMijt1lT', '2026-01-02T03:04:06Z', 500, 'boom', 12.5);
SELECT setval(pg_get_serial_sequence('webhook_attempts', 'seq'), (SELECT MAX(seq) FROM webhook_attempts));
INSERT INTO "conversations" ("seq", "id", "organization_id", "environment", "agent_id", "created_at", "updated_at") OVERRIDING SYSTEM VALUE VALUES (1, 'conv_Fb89ZMZkricMCNU6vMrUkxth', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'agt_old1', '2026-11-25T22:16:58.404Z', '2026-11-25T22:16:58.405Z');
SELECT setval(pg_get_serial_sequence('conversations', 'seq'), (SELECT MAX(seq) FROM conversations));
INSERT INTO "messages" ("seq", "conversation_id", "role", "content", "citations", "created_at") OVERRIDING SYSTEM VALUE VALUES (1, 'conv_Fb89ZMZkricMCNU6vMrUkxth', 'user', 'Where are the blades?', '[]', '2026-11-25T22:16:58.405Z');
INSERT INTO "messages" ("seq", "conversation_id", "role", "content", "citations", "created_at") OVERRIDING SYSTEM VALUE VALUES (2, 'conv_Fb89ZMZkricMCNU6vMrUkxth', 'assistant', 'Rotterdam.', '[{"source": "file0.txt", "pages": [1]}]', '2026-11-25T22:16:58.405Z');
SELECT setval(pg_get_serial_sequence('messages', 'seq'), (SELECT MAX(seq) FROM messages));
INSERT INTO "idempotency_keys" ("organization_id", "environment", "key", "fingerprint", "status", "response_status", "response_body", "response_headers", "created_at") OVERRIDING SYSTEM VALUE VALUES ('org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'idem-done', 'fp1', 'done', 201, '\x7b226f6b223a747275657d'::bytea, NULL, 3000.0);
INSERT INTO "idempotency_keys" ("organization_id", "environment", "key", "fingerprint", "status", "response_status", "response_body", "response_headers", "created_at") OVERRIDING SYSTEM VALUE VALUES ('org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'idem-open', 'fp2', 'in_progress', NULL, NULL, NULL, 3000.0);
INSERT INTO "knowledge_tombstones" ("organization_id", "environment", "version", "ids") OVERRIDING SYSTEM VALUE VALUES ('org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 4, '\x070000000000000008000000000000000900000000000000'::bytea);
INSERT INTO "rate_limit_buckets" ("key_id", "tokens", "updated_at", "allowed") OVERRIDING SYSTEM VALUE VALUES ('key_old0', 4.0, 4000.0, true);
INSERT INTO "ingest_jobs" ("document_id", "organization_id", "environment", "kind", "filename", "content_type", "data", "attempts", "leased_until", "created_at") OVERRIDING SYSTEM VALUE VALUES ('doc_old3', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'file', 'upload.pdf', 'application/pdf', '\x255044462d312e342000ff206279746573'::bytea, 0, NULL, 1000.0);
INSERT INTO "term_counts" ("document_id", "organization_id", "environment", "term", "sentences") OVERRIDING SYSTEM VALUE VALUES ('doc_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', '', 4);
INSERT INTO "term_counts" ("document_id", "organization_id", "environment", "term", "sentences") OVERRIDING SYSTEM VALUE VALUES ('doc_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'blade', 2);
INSERT INTO "term_counts" ("document_id", "organization_id", "environment", "term", "sentences") OVERRIDING SYSTEM VALUE VALUES ('doc_old0', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'rotterdam', 1);
INSERT INTO "term_counts" ("document_id", "organization_id", "environment", "term", "sentences") OVERRIDING SYSTEM VALUE VALUES ('doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', '', 5);
INSERT INTO "term_counts" ("document_id", "organization_id", "environment", "term", "sentences") OVERRIDING SYSTEM VALUE VALUES ('doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'blade', 2);
INSERT INTO "term_counts" ("document_id", "organization_id", "environment", "term", "sentences") OVERRIDING SYSTEM VALUE VALUES ('doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'canteen', 1);
INSERT INTO "term_counts" ("document_id", "organization_id", "environment", "term", "sentences") OVERRIDING SYSTEM VALUE VALUES ('doc_old1', 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'rotterdam', 1);
INSERT INTO "vector_rows" ("chunk_id", "organization_id", "environment", "document_id", "dimension", "embedding", "exact") OVERRIDING SYSTEM VALUE VALUES (1, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old0', 8, '[0.00061893463,0.15039062,-0.13793945,-0.4482422,-0.22888184,-0.49902344,0.030273438,0.6743164]', '\x004f223a03f9193e3b4a0dbe2181e5be10566abecb8bffbe9ffbf73c96af2c3f'::bytea);
INSERT INTO "vector_rows" ("chunk_id", "organization_id", "environment", "document_id", "dimension", "embedding", "exact") OVERRIDING SYSTEM VALUE VALUES (2, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old0', 8, '[-0.32080078,-0.40429688,0.3190918,0.23254395,0.06866455,-0.6064453,-0.019058228,0.453125]', '\x2d31a4bef8facebe4267a33e7a1a6e3e6ea88c3dcb311bbf7f209cbc1df1e73e'::bytea);
INSERT INTO "vector_rows" ("chunk_id", "organization_id", "environment", "document_id", "dimension", "embedding", "exact") OVERRIDING SYSTEM VALUE VALUES (3, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old0', 8, '[-0.38134766,-0.12988281,-0.5395508,-0.3659668,-0.52246094,-0.066711426,-0.35961914,0.07696533]', '\xb047c3beb2f504be7b190abf3e56bbbe4dc705bf679c88bdaa20b8be91a19d3d'::bytea);
INSERT INTO "vector_rows" ("chunk_id", "organization_id", "environment", "document_id", "dimension", "embedding", "exact") OVERRIDING SYSTEM VALUE VALUES (4, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old1', 8, '[0.051483154,-0.061401367,-0.82666016,-0.17700195,-0.015930176,0.037231445,-0.5024414,-0.15698242]', '\xf2e4523da27f7bbd23a153bfc93035bed98182bc6a72183d89aa00bf82b120be'::bytea);
INSERT INTO "vector_rows" ("chunk_id", "organization_id", "environment", "document_id", "dimension", "embedding", "exact") OVERRIDING SYSTEM VALUE VALUES (5, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old1', 8, '[-0.46313477,-0.09729004,1.2568359,0.6894531,-0.32714844,-0.36865234,-0.25024414,1.5234375]', '\x9a24edbe5e3ec7bddee5a03fc67c303f8488a7befbb5bcbe9d1980be0303c33f'::bytea);
INSERT INTO "vector_rows" ("chunk_id", "organization_id", "environment", "document_id", "dimension", "embedding", "exact") OVERRIDING SYSTEM VALUE VALUES (6, 'org_iCQW9vGwwRHE9QLnqcxMIHOG', 'test', 'doc_old1', 8, '[0.043273926,0.024993896,-0.47998047,0.029830933,0.53222656,-0.60595703,0.33666992,0.04675293]', '\x9d41313de3b1cc3c27b9f5be5c5bf43cfb46083f042a1bbf4660ac3e7e853f3d'::bytea);
