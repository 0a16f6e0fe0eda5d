//! The batch upsert: one statement for any batch size.
//!
//! ```sql
//! INSERT INTO t (k, a, b)
//! SELECT DISTINCT ON (k) k, a, b
//!   FROM UNNEST($1::text[], $2::bigint[], $3::numeric(12,2)[]) WITH ORDINALITY AS v(k, a, b, ord)
//!  ORDER BY k, ord DESC
//! ON CONFLICT (k) DO UPDATE SET a = EXCLUDED.a, b = EXCLUDED.b
//! ```
//!
//! One array parameter per column (binary protocol), so a batch of 1,000 rows is one Bind
//! message and one executor run instead of 1,000. `DISTINCT ON … ORDER BY ord DESC` keeps
//! the last row per key: without it, two rows with one key in a batch would fail with
//! "ON CONFLICT DO UPDATE command cannot affect row a second time"; with it the batch
//! means what applying its rows in order would. The column types come from the catalog when
//! the table is described, so the statement is prepared once and the arrays are typed.

use bytes::BytesMut;
use tokio_postgres::types::{to_sql_checked, IsNull, Kind, ToSql, Type};
use tokio_postgres::Client;

use crate::error::SinkError;

/// One value of a row: anything tokio-postgres can encode for the column's type (`i64`
/// for `bigint`, `String`/`&'static str` for `text`, `Option<T>` for NULL, …).
pub type Value = Box<dyn ToSql + Send + Sync>;

/// One row to upsert, its values in the order of [`UpsertTable::columns`].
#[derive(Debug, Default)]
pub struct Row(pub Vec<Value>);

impl Row {
    /// An empty row.
    pub fn new() -> Self {
        Row(Vec::new())
    }

    /// Appends the next column's value.
    pub fn with(mut self, value: impl ToSql + Send + Sync + 'static) -> Self {
        self.0.push(Box::new(value));
        self
    }
}

/// Builds a [`Row`] from values in column order: `row!["p-1", 1250_i64, "acme"]`.
#[macro_export]
macro_rules! row {
    ($($v:expr),* $(,)?) => {
        $crate::Row(vec![$(Box::new($v) as $crate::Value),*])
    };
}

/// Which table a sink upserts into, by which key.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// The table, optionally schema-qualified (`ledger`, `finance.ledger`).
    pub table: String,
    /// The columns the upsert's conflict target names: a primary key or unique index of the
    /// table must cover exactly these.
    pub key: Vec<String>,
    /// The columns a [`Row`] carries, in order; empty means every column of the table except
    /// generated ones.
    pub columns: Vec<String>,
}

impl TableSpec {
    /// `table`, upserted by `key`, rows carrying every column.
    pub fn new(table: impl Into<String>, key: &[&str]) -> Self {
        TableSpec { table: table.into(), key: key.iter().map(|s| s.to_string()).collect(), columns: Vec::new() }
    }

    /// Rows carry these columns, in this order.
    pub fn columns(mut self, columns: &[&str]) -> Self {
        self.columns = columns.iter().map(|s| s.to_string()).collect();
        self
    }
}

/// A described table: column names and types from the catalog, and the statements.
#[derive(Debug, Clone)]
pub struct UpsertTable {
    /// The table name as the catalog quotes it.
    pub(crate) name: String,
    pub(crate) columns: Vec<(String, String)>,
    pub(crate) key: Vec<String>,
}

impl UpsertTable {
    /// Reads the columns' types from the catalog and checks the key.
    pub async fn describe(client: &Client, spec: &TableSpec) -> Result<UpsertTable, SinkError> {
        if spec.key.is_empty() {
            return Err(SinkError::Schema("the key names no column".into()));
        }
        let name: String = client
            .query_one("SELECT $1::text::regclass::text", &[&spec.table])
            .await
            .map_err(SinkError::pg(format!("looking up table {}", spec.table)))?
            .get(0);
        let rows = client
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typcategory = 'A'
                   FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped
                    AND a.attgenerated = ''
                  ORDER BY a.attnum",
                &[&spec.table],
            )
            .await
            .map_err(SinkError::pg(format!("reading the columns of {name}")))?;
        let all: Vec<(String, String, bool)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
        let wanted: Vec<String> =
            if spec.columns.is_empty() { all.iter().map(|c| c.0.clone()).collect() } else { spec.columns.clone() };
        let mut columns = Vec::with_capacity(wanted.len());
        for w in &wanted {
            let Some((n, ty, is_array)) = all.iter().find(|c| &c.0 == w) else {
                return Err(SinkError::Schema(format!("{name} has no (non-generated) column {w:?}")));
            };
            if *is_array {
                // UNNEST would flatten a column of arrays into its elements.
                return Err(SinkError::Schema(format!("column {n:?} of {name} is an array ({ty}): not supported")));
            }
            columns.push((n.clone(), ty.clone()));
        }
        for k in &spec.key {
            if !wanted.contains(k) {
                return Err(SinkError::Schema(format!("key column {k:?} is not among the row's columns {wanted:?}")));
            }
        }
        Ok(UpsertTable { name, columns, key: spec.key.clone() })
    }

    /// The columns a [`Row`] carries, in order.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|c| c.0.as_str())
    }

    fn conflict_clause(&self) -> String {
        let key = self.key.iter().map(|k| ident(k)).collect::<Vec<_>>().join(", ");
        let set: Vec<String> = self
            .columns
            .iter()
            .filter(|c| !self.key.contains(&c.0))
            .map(|c| format!("{0} = EXCLUDED.{0}", ident(&c.0)))
            .collect();
        if set.is_empty() {
            format!("ON CONFLICT ({key}) DO NOTHING")
        } else {
            format!("ON CONFLICT ({key}) DO UPDATE SET {}", set.join(", "))
        }
    }

    /// The batch statement (see the module docs).
    pub(crate) fn batch_sql(&self) -> String {
        let cols = self.columns.iter().map(|c| ident(&c.0)).collect::<Vec<_>>().join(", ");
        let key = self.key.iter().map(|k| ident(k)).collect::<Vec<_>>().join(", ");
        let arrays = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("${}::{}[]", i + 1, c.1))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "INSERT INTO {table} ({cols}) SELECT DISTINCT ON ({key}) {cols} \
             FROM UNNEST({arrays}) WITH ORDINALITY AS kafka_eos_v({cols}, kafka_eos_ord) \
             ORDER BY {key}, kafka_eos_ord DESC {conflict}",
            table = self.name,
            conflict = self.conflict_clause(),
        )
    }

    /// The one-row statement of the at-least-once baseline.
    pub(crate) fn row_sql(&self) -> String {
        let cols = self.columns.iter().map(|c| ident(&c.0)).collect::<Vec<_>>().join(", ");
        let params =
            self.columns.iter().enumerate().map(|(i, c)| format!("${}::{}", i + 1, c.1)).collect::<Vec<_>>().join(", ");
        format!("INSERT INTO {} ({cols}) VALUES ({params}) {}", self.name, self.conflict_clause())
    }

    /// The batch's rows turned into one array parameter per column.
    pub(crate) fn arrays<'a>(
        &self,
        rows: impl ExactSizeIterator<Item = &'a Row>,
    ) -> Result<Vec<ColumnArray<'a>>, SinkError> {
        let n = self.columns.len();
        let mut arrays: Vec<ColumnArray<'a>> = (0..n).map(|_| ColumnArray(Vec::with_capacity(rows.len()))).collect();
        for (i, row) in rows.enumerate() {
            if row.0.len() != n {
                return Err(SinkError::InvalidBatch(format!(
                    "row {i} has {} values, the table spec {n} columns ({:?})",
                    row.0.len(),
                    self.columns().collect::<Vec<_>>()
                )));
            }
            for (col, v) in arrays.iter_mut().zip(&row.0) {
                col.0.push(&**v);
            }
        }
        Ok(arrays)
    }
}

/// A double-quoted SQL identifier.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One column of a batch, encoded as a one-dimensional array of the column's type.
#[derive(Debug)]
pub(crate) struct ColumnArray<'a>(pub Vec<&'a (dyn ToSql + Sync)>);

impl ToSql for ColumnArray<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let Kind::Array(member) = ty.kind() else {
            return Err(format!("a batch column is sent as an array, the statement expects {ty}").into());
        };
        let len = i32::try_from(self.0.len()).map_err(|_| "batch too large")?;
        let dims = [postgres_protocol::types::ArrayDimension { len, lower_bound: 1 }];
        postgres_protocol::types::array_to_sql(
            dims,
            member.oid(),
            self.0.iter(),
            |v, buf| match v.to_sql_checked(member, buf)? {
                IsNull::No => Ok(postgres_protocol::IsNull::No),
                IsNull::Yes => Ok(postgres_protocol::IsNull::Yes),
            },
            out,
        )?;
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Array(_))
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> UpsertTable {
        UpsertTable {
            name: "ledger".into(),
            columns: vec![("id".into(), "text".into()), ("cents".into(), "bigint".into()), ("m".into(), "text".into())],
            key: vec!["id".into()],
        }
    }

    #[test]
    fn batch_statement() {
        assert_eq!(
            table().batch_sql(),
            "INSERT INTO ledger (\"id\", \"cents\", \"m\") SELECT DISTINCT ON (\"id\") \"id\", \"cents\", \"m\" \
             FROM UNNEST($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY AS kafka_eos_v(\"id\", \"cents\", \"m\", kafka_eos_ord) \
             ORDER BY \"id\", kafka_eos_ord DESC ON CONFLICT (\"id\") DO UPDATE SET \"cents\" = EXCLUDED.\"cents\", \"m\" = EXCLUDED.\"m\""
        );
    }

    #[test]
    fn key_only_table_does_nothing_on_conflict() {
        let t = UpsertTable { columns: vec![("id".into(), "text".into())], ..table() };
        assert!(t.row_sql().ends_with("ON CONFLICT (\"id\") DO NOTHING"));
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(ident("we\"ird"), "\"we\"\"ird\"");
    }

    #[test]
    fn rows_must_match_the_columns() {
        let rows = [crate::row!["a".to_string(), 1_i64, "m".to_string()], crate::row!["b".to_string()]];
        let err = table().arrays(rows.iter()).unwrap_err().to_string();
        assert!(err.contains("row 1 has 1 values"), "{err}");
    }
}
