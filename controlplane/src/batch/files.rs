//! File records: the metadata of what `/v1/files` holds. The bytes live in
//! object storage; a record is written only after its object, so a record
//! never points at nothing, and a failed upload leaves no record.

use stoker_schemas::ids::FileId;

use crate::store::Db;

use super::{BatchError, on_db};

/// One file as `/v1/files` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRecord {
    pub id: FileId,
    pub tenant: String,
    pub filename: String,
    /// `batch` (uploads), `batch_output` (results).
    pub purpose: String,
    pub bytes: u64,
    pub lines: u64,
    pub object_key: String,
    pub endpoint: Option<String>,
    pub estimated_tokens: u64,
    /// Unix milliseconds.
    pub created_at: i64,
}

type Row = (
    String,
    String,
    String,
    String,
    i64,
    i64,
    String,
    Option<String>,
    i64,
    i64,
);

/// A stored row; an id that is not a file id is a corrupt row.
fn from_row(r: Row) -> Result<FileRecord, BatchError> {
    let id = FileId::new(r.0).map_err(|e| BatchError::Corrupt(format!("a file record: {e}")))?;
    Ok(FileRecord {
        id,
        tenant: r.1,
        filename: r.2,
        purpose: r.3,
        bytes: r.4.max(0) as u64,
        lines: r.5.max(0) as u64,
        object_key: r.6,
        endpoint: r.7,
        estimated_tokens: r.8.max(0) as u64,
        created_at: r.9,
    })
}

const COLUMNS: &str = "id, tenant, filename, purpose, bytes, lines, object_key, endpoint, \
                       estimated_tokens, created_at";

/// Writes a record; an existing one with the same id is replaced (outputs are
/// rewritten when finalization runs again after a crash).
pub async fn put(db: &Db, f: &FileRecord) -> Result<(), BatchError> {
    const Q: &str = "INSERT INTO batch_files (id, tenant, filename, purpose, bytes, lines, \
         object_key, endpoint, estimated_tokens, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (id) DO UPDATE SET bytes = excluded.bytes, lines = excluded.lines, \
         object_key = excluded.object_key, created_at = excluded.created_at";
    on_db!(db, pool, q => {
        sqlx::query(q)
            .bind(f.id.as_str())
            .bind(&f.tenant)
            .bind(&f.filename)
            .bind(&f.purpose)
            .bind(f.bytes as i64)
            .bind(f.lines as i64)
            .bind(&f.object_key)
            .bind(&f.endpoint)
            .bind(f.estimated_tokens as i64)
            .bind(f.created_at)
            .execute(pool)
            .await?;
    } with Q);
    Ok(())
}

pub async fn get(db: &Db, id: &str) -> Result<Option<FileRecord>, BatchError> {
    let q_text = format!("SELECT {COLUMNS} FROM batch_files WHERE id = $1");
    let row: Option<Row> = on_db!(db, pool, q => {
        sqlx::query_as(q).bind(id).fetch_optional(pool).await?
    } with &q_text);
    row.map(from_row).transpose()
}

/// A tenant's files, newest first.
pub async fn list(db: &Db, tenant: &str, limit: u32) -> Result<Vec<FileRecord>, BatchError> {
    let q_text = format!(
        "SELECT {COLUMNS} FROM batch_files WHERE tenant = $1 \
         ORDER BY created_at DESC, id DESC LIMIT $2"
    );
    let rows: Vec<Row> = on_db!(db, pool, q => {
        sqlx::query_as(q).bind(tenant).bind(i64::from(limit)).fetch_all(pool).await?
    } with &q_text);
    rows.into_iter().map(from_row).collect()
}

/// Bytes of every file `tenant` stores (its batches' outputs included): what
/// the tenant's `max_file_bytes` quota counts.
pub async fn tenant_bytes(db: &Db, tenant: &str) -> Result<u64, BatchError> {
    const Q: &str =
        "SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM batch_files WHERE tenant = $1";
    let (n,): (i64,) = on_db!(db, pool, q => {
        sqlx::query_as(q).bind(tenant).fetch_one(pool).await?
    } with Q);
    Ok(n.max(0) as u64)
}

/// Removes a record; whether one was there.
pub async fn delete(db: &Db, id: &str) -> Result<bool, BatchError> {
    const Q: &str = "DELETE FROM batch_files WHERE id = $1";
    let n = on_db!(db, pool, q => {
        sqlx::query(q).bind(id).execute(pool).await?.rows_affected()
    } with Q);
    Ok(n > 0)
}
