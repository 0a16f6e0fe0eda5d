use std::time::Duration;

use kafka_eos::state::backend::{KeyValueBackend, Location};

use super::DiskBackend;

const AT: Location<'static> = Location { application_id: "app", store: "totals", partition: 3 };

fn kv(k: &str, v: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()))
}

fn opened(root: &std::path::Path, sync: Duration) -> DiskBackend {
    let mut b = DiskBackend::new(root, sync);
    b.open(&AT).expect("open");
    b
}

#[test]
fn entries_checkpoint_and_sizes_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = opened(dir.path(), Duration::ZERO);
    assert_eq!(b.path(), Some(dir.path().join("app/totals/3/state.redb").as_path()));
    b.write_checkpointed(vec![kv("a", "12"), kv("b", "3")], Some(10)).unwrap();
    b.write_checkpointed(vec![kv("a", "1"), (b"b".to_vec(), None), kv("c", "4")], Some(14)).unwrap();
    drop(b);

    let mut b = DiskBackend::new(dir.path(), Duration::ZERO);
    let cp = b.open(&AT).unwrap().expect("a checkpoint");
    assert_eq!(cp.next_offset, 14);
    assert!(cp.written_at.elapsed().unwrap() < Duration::from_secs(60));
    assert_eq!((b.len(), b.size_bytes()), (2, 4));
    assert_eq!(b.try_get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(b.get(b"b"), None);
    let all: Vec<_> = b.scan().collect();
    assert_eq!(all, vec![(b"a".to_vec(), b"1".to_vec()), (b"c".to_vec(), b"4".to_vec())]);
}

#[test]
fn a_write_without_an_offset_keeps_the_checkpoint_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = opened(dir.path(), Duration::ZERO);
    b.write_checkpointed(vec![kv("a", "1")], Some(5)).unwrap();
    b.write_checkpointed(vec![kv("a", "2")], None).unwrap();
    drop(b);
    let mut b = DiskBackend::new(dir.path(), Duration::ZERO);
    assert_eq!(b.open(&AT).unwrap().map(|c| c.next_offset), Some(5));
    assert_eq!(b.get(b"a"), Some(b"2".to_vec()));
}

#[test]
fn a_new_store_has_no_checkpoint_and_partitions_are_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = opened(dir.path(), Duration::ZERO);
    b.write_checkpointed(vec![kv("a", "1")], Some(1)).unwrap();
    let mut other = DiskBackend::new(dir.path(), Duration::ZERO);
    let at = Location { partition: 4, ..AT };
    assert_eq!(other.open(&at).unwrap(), None);
    assert!(other.is_empty() && other.scan().next().is_none());
    assert_eq!(other.try_get(b"a").unwrap(), None);
}

#[test]
fn unsynced_commits_are_atomic_and_visible_and_a_clean_close_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = opened(dir.path(), Duration::from_secs(3600));
    for i in 0..50 {
        b.write_checkpointed(vec![kv(&format!("k{i:02}"), "v")], Some(i + 1)).unwrap();
    }
    assert_eq!(b.len(), 50);
    drop(b);
    let mut b = DiskBackend::new(dir.path(), Duration::ZERO);
    // redb makes a pending unsynced commit durable when the database is closed.
    assert_eq!(b.open(&AT).unwrap().map(|c| c.next_offset), Some(50));
    assert_eq!(b.len(), 50);
}

#[test]
fn a_corrupt_file_fails_to_open_and_clear_starts_it_anew() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = opened(dir.path(), Duration::ZERO);
    b.write_checkpointed(vec![kv("a", "1")], Some(1)).unwrap();
    let path = b.path().unwrap().to_path_buf();
    drop(b);
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    std::fs::write(&path, vec![0xAB; len]).unwrap();

    let mut b = DiskBackend::new(dir.path(), Duration::ZERO);
    let err = b.open(&AT).expect_err("garbage must not open");
    assert!(err.to_string().contains("rebuilt from its changelog"), "{err}");
    b.clear().unwrap();
    assert!(b.is_empty());
    b.write_checkpointed(vec![kv("b", "2")], Some(3)).unwrap();
    drop(b);
    let mut b = DiskBackend::new(dir.path(), Duration::ZERO);
    assert_eq!(b.open(&AT).unwrap().map(|c| c.next_offset), Some(3));
    assert_eq!(b.get(b"a"), None);
}

#[test]
fn clear_drops_entries_and_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = opened(dir.path(), Duration::ZERO);
    b.write_checkpointed(vec![kv("a", "1")], Some(9)).unwrap();
    b.clear().unwrap();
    assert_eq!((b.len(), b.size_bytes()), (0, 0));
    drop(b);
    let mut b = DiskBackend::new(dir.path(), Duration::ZERO);
    assert_eq!(b.open(&AT).unwrap(), None);
}

#[test]
fn a_committed_reader_sees_each_commit_whole_and_keeps_reading_after_its_backend_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = DiskBackend::new(dir.path(), Duration::ZERO);
    assert!(b.committed_reader().is_none(), "no database before open");
    b.open(&AT).unwrap();
    let reader = b.committed_reader().expect("an opened store has a reader");
    assert_eq!(reader.get(b"a").unwrap(), None, "a new database has no table yet");
    b.write_checkpointed(vec![kv("b", "2"), kv("a", "1")], Some(2)).unwrap();
    assert_eq!(reader.get(b"a").unwrap(), Some(b"1".to_vec()));
    let mut seen = Vec::new();
    reader
        .scan(&mut |k: &[u8], v: &[u8]| {
            seen.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
    assert_eq!(seen, vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"2".to_vec())]);
    b.write_checkpointed(vec![(b"a".to_vec(), None)], Some(3)).unwrap();
    drop(b);
    assert_eq!(reader.get(b"a").unwrap(), None);
    assert_eq!(reader.get(b"b").unwrap(), Some(b"2".to_vec()));
}
