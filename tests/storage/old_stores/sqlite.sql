BEGIN TRANSACTION;
CREATE TABLE "_sqlite_migrations" (
   "id" INTEGER PRIMARY KEY,
   "migration_set" TEXT,
   "name" TEXT,
   "applied_at" TEXT
);
INSERT INTO "_sqlite_migrations" VALUES(1,'agentcore','m001_tenancy_and_agents','2026-11-25 22:16:58.289534+00:00');
INSERT INTO "_sqlite_migrations" VALUES(2,'agentcore','m002_knowledge','2026-11-25 22:16:58.289971+00:00');
INSERT INTO "_sqlite_migrations" VALUES(3,'agentcore','m003_events_and_webhooks','2026-11-25 22:16:58.290420+00:00');
INSERT INTO "_sqlite_migrations" VALUES(4,'agentcore','m004_chat_and_idempotency','2026-11-25 22:16:58.290744+00:00');
INSERT INTO "_sqlite_migrations" VALUES(5,'agentcore','m005_chunk_page_offsets','2026-11-25 22:16:58.291042+00:00');
INSERT INTO "_sqlite_migrations" VALUES(6,'agentcore','m006_knowledge_change_log','2026-11-25 22:16:58.291586+00:00');
INSERT INTO "_sqlite_migrations" VALUES(7,'agentcore','m007_rate_limit_buckets','2026-11-25 22:16:58.291824+00:00');
INSERT INTO "_sqlite_migrations" VALUES(8,'agentcore','m008_document_status_and_ingest_jobs','2026-11-25 22:16:58.292412+00:00');
INSERT INTO "_sqlite_migrations" VALUES(9,'agentcore','m009_term_counts','2026-11-25 22:16:58.292616+00:00');
INSERT INTO "_sqlite_migrations" VALUES(10,'agentcore','m010_workspace_index_dtype','2026-11-25 22:16:58.292947+00:00');
INSERT INTO "_sqlite_migrations" VALUES(11,'agentcore','m011_document_terms','2026-11-25 22:16:58.293802+00:00');
INSERT INTO "_sqlite_migrations" VALUES(12,'agentcore','m012_drop_chunks_workspace_index','2026-11-25 22:16:58.293943+00:00');
CREATE TABLE agents (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            environment TEXT NOT NULL,
            name TEXT NOT NULL,
            role TEXT NOT NULL,
            status TEXT NOT NULL,
            system_prompt TEXT NOT NULL,
            tools TEXT NOT NULL,
            model TEXT,
            handoff_on_no_answer INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
INSERT INTO "agents" VALUES(1,'agt_old0','org_31t0iCFTjcR6wpRxkgg0zkft','test','Agent 0','support','draft','Be kind.','[{"name": "lookup", "description": "d", "parameters": {"type": "object"}}]',NULL,0,'2026-01-02T03:04:05Z','2026-01-02T03:04:05Z');
INSERT INTO "agents" VALUES(2,'agt_old1','org_31t0iCFTjcR6wpRxkgg0zkft','test','Agent 1','support','deployed','Be kind.','[{"name": "lookup", "description": "d", "parameters": {"type": "object"}}]','extractive',1,'2026-01-02T03:04:05Z','2026-01-02T03:04:05Z');
INSERT INTO "agents" VALUES(3,'agt_old2','org_31t0iCFTjcR6wpRxkgg0zkft','test','Agent 2','support','archived','Be kind.','[{"name": "lookup", "description": "d", "parameters": {"type": "object"}}]','extractive',0,'2026-01-02T03:04:05Z','2026-01-02T03:04:05Z');
CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            environment TEXT NOT NULL CHECK (environment IN ('test', 'live')),
            scopes TEXT NOT NULL,
            digest TEXT NOT NULL UNIQUE,
            prefix TEXT NOT NULL,
            last4 TEXT NOT NULL,
            name TEXT,
            created_at TEXT NOT NULL,
            expires_at TEXT,
            revoked_at TEXT,
            last_used_at TEXT,
            rotated_from TEXT
        );
INSERT INTO "api_keys" VALUES('key_old0','org_31t0iCFTjcR6wpRxkgg0zkft','test','["read", "write"]','digest-0','ak_test_','abc0','ci','2026-01-02T03:04:05.000Z',NULL,NULL,'2026-01-03T00:00:00.000Z',NULL);
INSERT INTO "api_keys" VALUES('key_old1','org_31t0iCFTjcR6wpRxkgg0zkft','test','["read"]','digest-1','ak_test_','abc1',NULL,'2026-01-02T03:04:05.000Z',NULL,'2026-01-04T00:00:00.000Z',NULL,NULL);
CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            text TEXT NOT NULL,
            pages TEXT NOT NULL
        , page_offsets TEXT NOT NULL DEFAULT '[]');
INSERT INTO "chunks" VALUES(1,'doc_old0','org_31t0iCFTjcR6wpRxkgg0zkft','test',0,'text 0.0','[1]','[0]');
INSERT INTO "chunks" VALUES(2,'doc_old0','org_31t0iCFTjcR6wpRxkgg0zkft','test',1,'text 0.1','[1, 2]','[0, 5]');
INSERT INTO "chunks" VALUES(3,'doc_old0','org_31t0iCFTjcR6wpRxkgg0zkft','test',2,'text 0.2','[1, 2]','[0, 5]');
INSERT INTO "chunks" VALUES(4,'doc_old1','org_31t0iCFTjcR6wpRxkgg0zkft','test',0,'text 1.0','[1]','[0]');
INSERT INTO "chunks" VALUES(5,'doc_old1','org_31t0iCFTjcR6wpRxkgg0zkft','test',1,'text 1.1','[1, 2]','[0, 5]');
INSERT INTO "chunks" VALUES(6,'doc_old1','org_31t0iCFTjcR6wpRxkgg0zkft','test',2,'text 1.2','[1, 2]','[0, 5]');
CREATE TABLE conversations (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            agent_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
INSERT INTO "conversations" VALUES(1,'conv_MPLRwMHOP654n1lTT8FISmsz','org_31t0iCFTjcR6wpRxkgg0zkft','test','agt_old1','2026-11-25T22:16:58.308Z','2026-11-25T22:16:58.308Z');
CREATE TABLE document_terms (
            document_seq INTEGER PRIMARY KEY REFERENCES documents(seq) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            version INTEGER NOT NULL,
            sentences INTEGER NOT NULL,
            stems TEXT NOT NULL
        );
INSERT INTO "document_terms" VALUES(1,'org_31t0iCFTjcR6wpRxkgg0zkft','test',1,4,'blade 2
rotterdam 1');
INSERT INTO "document_terms" VALUES(2,'org_31t0iCFTjcR6wpRxkgg0zkft','test',2,5,'blade 2
canteen 1
rotterdam 1');
CREATE TABLE documents (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            source TEXT NOT NULL,
            content_type TEXT NOT NULL,
            pages INTEGER NOT NULL,
            chunks INTEGER NOT NULL,
            bytes INTEGER NOT NULL,
            created_at TEXT NOT NULL
        , status TEXT NOT NULL DEFAULT 'ready', last_error TEXT);
INSERT INTO "documents" VALUES(1,'doc_old0','org_31t0iCFTjcR6wpRxkgg0zkft','test','file0.txt','text/plain',2,3,1000,'2026-01-02T03:04:05.000Z','ready',NULL);
INSERT INTO "documents" VALUES(2,'doc_old1','org_31t0iCFTjcR6wpRxkgg0zkft','test','file1.txt','text/plain',2,3,1001,'2026-01-02T03:04:05.000Z','ready',NULL);
INSERT INTO "documents" VALUES(4,'doc_old3','org_31t0iCFTjcR6wpRxkgg0zkft','test','file3.txt','text/plain',2,0,1003,'2026-01-02T03:04:05.000Z','processing',NULL);
INSERT INTO "documents" VALUES(5,'doc_old4','org_31t0iCFTjcR6wpRxkgg0zkft','test','file4.txt','text/plain',2,0,1004,'2026-01-02T03:04:05.000Z','failed','{"type":"about:blank","title":"Bad","status":422,"detail":"no","code":"no_text","param":null,"request_id":null}');
CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            type TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            data TEXT NOT NULL
        );
INSERT INTO "events" VALUES(1,'evt_old0','org_31t0iCFTjcR6wpRxkgg0zkft','test','agent.action','2026-01-02T03:04:05Z','{"n":0,"nested":{"a":[1,2]}}');
INSERT INTO "events" VALUES(2,'evt_old1','org_31t0iCFTjcR6wpRxkgg0zkft','test','agent.action','2026-01-02T03:04:05Z','{"n":1,"nested":{"a":[1,2]}}');
CREATE TABLE idempotency_keys (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            key TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            status TEXT NOT NULL,
            response_status INTEGER,
            response_body BLOB,
            response_headers TEXT,
            created_at REAL NOT NULL,
            PRIMARY KEY (organization_id, environment, key)
        );
INSERT INTO "idempotency_keys" VALUES('org_31t0iCFTjcR6wpRxkgg0zkft','test','idem-done','fp1','done',201,'{"ok":true}',NULL,3000.0);
INSERT INTO "idempotency_keys" VALUES('org_31t0iCFTjcR6wpRxkgg0zkft','test','idem-open','fp2','in_progress',NULL,NULL,NULL,3000.0);
CREATE TABLE ingest_jobs (
            document_id TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            kind TEXT NOT NULL,
            filename TEXT NOT NULL,
            content_type TEXT,
            data BLOB NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            leased_until REAL,
            created_at REAL NOT NULL
        );
INSERT INTO "ingest_jobs" VALUES('doc_old3','org_31t0iCFTjcR6wpRxkgg0zkft','test','file','upload.pdf','application/pdf',X'255044462D312E342000FF206279746573',0,NULL,1000.0);
CREATE TABLE knowledge_state (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            embedder TEXT,
            dimension INTEGER,
            version INTEGER NOT NULL DEFAULT 0, log_floor INTEGER NOT NULL DEFAULT 0, index_dtype TEXT,
            PRIMARY KEY (organization_id, environment)
        );
INSERT INTO "knowledge_state" VALUES('org_31t0iCFTjcR6wpRxkgg0zkft','test','hashing-v1',8,5,0,'float32');
CREATE TABLE knowledge_tombstones (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            version INTEGER NOT NULL,
            ids BLOB NOT NULL
        , term_version INTEGER, term_sentences INTEGER, term_stems TEXT);
INSERT INTO "knowledge_tombstones" VALUES('org_31t0iCFTjcR6wpRxkgg0zkft','test',4,X'070000000000000008000000000000000900000000000000',3,6,'blade 2
canteen 2
rotterdam 1');
CREATE TABLE messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            citations TEXT NOT NULL DEFAULT '[]',
            created_at TEXT NOT NULL
        );
INSERT INTO "messages" VALUES(1,'conv_MPLRwMHOP654n1lTT8FISmsz','user','Where are the blades?','[]','2026-11-25T22:16:58.308Z');
INSERT INTO "messages" VALUES(2,'conv_MPLRwMHOP654n1lTT8FISmsz','assistant','Rotterdam.','[{"source": "file0.txt", "pages": [1]}]','2026-11-25T22:16:58.308Z');
CREATE TABLE organizations (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL
        );
INSERT INTO "organizations" VALUES('org_31t0iCFTjcR6wpRxkgg0zkft','acme','2026-11-25T22:16:58.294Z');
CREATE TABLE rate_limit_buckets (
            key_id TEXT PRIMARY KEY,
            tokens REAL NOT NULL,
            updated_at REAL NOT NULL,
            allowed INTEGER NOT NULL
        ) WITHOUT ROWID;
INSERT INTO "rate_limit_buckets" VALUES('key_old0',4.0,4000.0,1);
CREATE TABLE vector_segments (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            document_id TEXT,
            embedder TEXT NOT NULL,
            dimension INTEGER NOT NULL,
            count INTEGER NOT NULL,
            ids BLOB NOT NULL,
            vectors BLOB NOT NULL
        , version INTEGER NOT NULL DEFAULT 0);
INSERT INTO "vector_segments" VALUES(1,'org_31t0iCFTjcR6wpRxkgg0zkft','test','doc_old0','hashing-v1',8,3,X'010000000000000002000000000000000300000000000000',X'004F223A03F9193E3B4A0DBE2181E5BE10566ABECB8BFFBE9FFBF73C96AF2C3F2D31A4BEF8FACEBE4267A33E7A1A6E3E6EA88C3DCB311BBF7F209CBC1DF1E73EB047C3BEB2F504BE7B190ABF3E56BBBE4DC705BF679C88BDAA20B8BE91A19D3D',1);
INSERT INTO "vector_segments" VALUES(2,'org_31t0iCFTjcR6wpRxkgg0zkft','test','doc_old1','hashing-v1',8,2,X'04000000000000000600000000000000',X'F2E4523DA27F7BBD23A153BFC93035BED98182BC6A72183D89AA00BF82B120BE9D41313DE3B1CC3C27B9F5BE5C5BF43CFB46083F042A1BBF4660AC3E7E853F3D',2);
INSERT INTO "vector_segments" VALUES(4,'org_31t0iCFTjcR6wpRxkgg0zkft','test','doc_old1','hashing-v1',8,1,X'0500000000000000',X'9A24EDBE5E3EC7BDDEE5A03FC67C303F8488A7BEFBB5BCBE9D1980BE0303C33F',5);
CREATE TABLE webhook_attempts (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            delivery_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            attempted_at TEXT NOT NULL,
            status_code INTEGER,
            error TEXT,
            duration_ms REAL NOT NULL
        );
INSERT INTO "webhook_attempts" VALUES(1,'dlv_bIVR2ypQopfhzjbh6hHYwc7L','whk_3VExTRPOWtHVubN7ePfne1Lu','2026-01-02T03:04:06Z',500,'boom',12.5);
CREATE TABLE webhook_deliveries (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            event_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL,
            leased_until REAL,
            last_status_code INTEGER,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
INSERT INTO "webhook_deliveries" VALUES(1,'dlv_bIVR2ypQopfhzjbh6hHYwc7L','evt_old0','whk_3VExTRPOWtHVubN7ePfne1Lu','org_31t0iCFTjcR6wpRxkgg0zkft','test','pending',1,2100.0,NULL,500,'boom','2026-11-25T22:16:58.307Z','2026-11-25T22:16:58.308Z');
INSERT INTO "webhook_deliveries" VALUES(2,'dlv_Z0crM8dJq6KP7UfltxQNkYuY','evt_old0','whk_4TJC4kVeJMNoOvNacOEyzKWA','org_31t0iCFTjcR6wpRxkgg0zkft','test','pending',0,2000.0,NULL,NULL,NULL,'2026-11-25T22:16:58.307Z','2026-11-25T22:16:58.307Z');
INSERT INTO "webhook_deliveries" VALUES(3,'dlv_pz0fEDbcNEPLMtkVOm1qkX7K','evt_old1','whk_3VExTRPOWtHVubN7ePfne1Lu','org_31t0iCFTjcR6wpRxkgg0zkft','test','pending',0,2001.0,NULL,NULL,NULL,'2026-11-25T22:16:58.307Z','2026-11-25T22:16:58.307Z');
INSERT INTO "webhook_deliveries" VALUES(4,'dlv_QdvYhgHHd1BgnLRJGa5UUzIp','evt_old1','whk_4TJC4kVeJMNoOvNacOEyzKWA','org_31t0iCFTjcR6wpRxkgg0zkft','test','pending',0,2001.0,NULL,NULL,NULL,'2026-11-25T22:16:58.307Z','2026-11-25T22:16:58.307Z');
CREATE TABLE webhook_subscriptions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            url TEXT NOT NULL,
            events TEXT NOT NULL,
            status TEXT NOT NULL,
            secret TEXT NOT NULL,
            description TEXT,
            previous_secret TEXT,
            previous_secret_expires_at REAL,
            failing_since REAL,
            disabled_reason TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
INSERT INTO "webhook_subscriptions" VALUES(1,'whk_3VExTRPOWtHVubN7ePfne1Lu','org_31t0iCFTjcR6wpRxkgg0zkft','test','https://example.com/h','["agent.action"]','active','whsec_a','d',NULL,NULL,2000.5,NULL,'2026-11-25T22:16:58.307Z','2026-11-25T22:16:58.307Z');
INSERT INTO "webhook_subscriptions" VALUES(2,'whk_4TJC4kVeJMNoOvNacOEyzKWA','org_31t0iCFTjcR6wpRxkgg0zkft','test','https://example.com/h','["agent.action", "agent.error"]','active','whsec_a','d','whsec_0',5000.0,NULL,NULL,'2026-11-25T22:16:58.307Z','2026-11-25T22:16:58.307Z');
CREATE UNIQUE INDEX "idx__sqlite_migrations_migration_set_name"
    ON "_sqlite_migrations" ("migration_set", "name");
CREATE INDEX api_keys_org ON api_keys (organization_id);
CREATE INDEX agents_workspace ON agents (organization_id, environment, seq);
CREATE INDEX documents_workspace ON documents (organization_id, environment, seq);
CREATE INDEX chunks_document ON chunks (document_id);
CREATE INDEX vector_segments_workspace
            ON vector_segments (organization_id, environment, document_id);
CREATE INDEX events_workspace ON events (organization_id, environment, seq);
CREATE INDEX webhook_subscriptions_workspace
            ON webhook_subscriptions (organization_id, environment, seq);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_subscription
            ON webhook_deliveries (subscription_id, seq);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, seq);
CREATE INDEX conversations_workspace ON conversations (organization_id, environment);
CREATE INDEX messages_conversation ON messages (conversation_id, seq);
CREATE INDEX vector_segments_version
            ON vector_segments (organization_id, environment, version);
CREATE INDEX knowledge_tombstones_version
            ON knowledge_tombstones (organization_id, environment, version);
CREATE INDEX ingest_jobs_lease ON ingest_jobs (leased_until, created_at);
CREATE INDEX document_terms_version
            ON document_terms (organization_id, environment, version);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('agents',3);
INSERT INTO "sqlite_sequence" VALUES('documents',5);
INSERT INTO "sqlite_sequence" VALUES('chunks',9);
INSERT INTO "sqlite_sequence" VALUES('vector_segments',4);
INSERT INTO "sqlite_sequence" VALUES('webhook_subscriptions',2);
INSERT INTO "sqlite_sequence" VALUES('events',2);
INSERT INTO "sqlite_sequence" VALUES('webhook_deliveries',4);
INSERT INTO "sqlite_sequence" VALUES('webhook_attempts',1);
INSERT INTO "sqlite_sequence" VALUES('conversations',1);
INSERT INTO "sqlite_sequence" VALUES('messages',2);
COMMIT;
