import type { Migration } from '../postgres/database.js';

/**
 * Read models in PostgreSQL: every collection in one table keyed by (collection, key), with
 * keys in the "C" collation (byte order, which for UTF-8 is code point order: the order LevelDB
 * and MongoDB give, keyRange.ts), so that a range of keys is a range of the primary key's index.
 *
 * `rm_update` is an `inc`/`merge` onto a stored document: numbers added as doubles (as
 * JavaScript adds them; a missing or non-numeric field counts as 0), then fields set.
 * `rm_apply` applies a commit's composed changes (one per key): a document (put), null with no
 * update (delete), or an update (`sets` and `incs`). `rm_commit` does it with the projection's
 * checkpoint in one statement, so one round trip: under the projection's advisory lock, nothing
 * when the checkpoint is at or past the position.
 */
export const READ_MODEL_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE rm_docs (
        collection text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        doc jsonb NOT NULL,
        PRIMARY KEY (collection, key)
      );
      CREATE TABLE rm_checkpoints (
        projection text PRIMARY KEY,
        position text COLLATE "C" NOT NULL
      );

      CREATE FUNCTION rm_update(old jsonb, sets jsonb, incs jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
        SELECT coalesce(old, '{}'::jsonb)
          || coalesce((
               SELECT jsonb_object_agg(f.key, to_jsonb(
                 CASE WHEN jsonb_typeof(old -> f.key) = 'number' THEN (old ->> f.key)::float8 ELSE 0 END + f.value::float8))
               FROM jsonb_each_text(incs) AS f), '{}'::jsonb)
          || sets
      $$;

      CREATE FUNCTION rm_apply(p_collections text[], p_keys text[], p_docs jsonb[], p_sets jsonb[], p_incs jsonb[]) RETURNS void LANGUAGE plpgsql AS $$
      BEGIN
        DELETE FROM rm_docs d
          USING unnest(p_collections, p_keys, p_docs, p_sets) AS u(c, k, doc, sets)
          WHERE u.doc IS NULL AND u.sets IS NULL AND d.collection = u.c AND d.key = u.k;
        INSERT INTO rm_docs (collection, key, doc)
          SELECT u.c, u.k, u.doc FROM unnest(p_collections, p_keys, p_docs) AS u(c, k, doc) WHERE u.doc IS NOT NULL
          ON CONFLICT (collection, key) DO UPDATE SET doc = EXCLUDED.doc;
        FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
          CONTINUE WHEN p_sets[i] IS NULL;
          INSERT INTO rm_docs AS d (collection, key, doc) VALUES (p_collections[i], p_keys[i], rm_update(NULL, p_sets[i], p_incs[i]))
            ON CONFLICT (collection, key) DO UPDATE SET doc = rm_update(d.doc, p_sets[i], p_incs[i]);
        END LOOP;
      END
      $$;

      CREATE FUNCTION rm_commit(p_projection text, p_position text, p_collections text[], p_keys text[], p_docs jsonb[], p_sets jsonb[], p_incs jsonb[])
      RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock(4245, hashtext(p_projection));
        IF EXISTS (SELECT 1 FROM rm_checkpoints WHERE projection = p_projection AND position >= p_position) THEN
          RETURN false;
        END IF;
        PERFORM rm_apply(p_collections, p_keys, p_docs, p_sets, p_incs);
        INSERT INTO rm_checkpoints (projection, position) VALUES (p_projection, p_position)
          ON CONFLICT (projection) DO UPDATE SET position = EXCLUDED.position;
        RETURN true;
      END
      $$;
    `,
  },
];
