//! Safe output: every file is written to a temporary sibling and then moved into place,
//! so an interrupted run never leaves a truncated file; an existing file is kept unless
//! the caller asks to overwrite it.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path} exists; pass --force to overwrite it")]
    Exists { path: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn tmp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let unique = format!(
        ".{name}.tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "");
    path.with_file_name(unique)
}

/// Write `bytes` to `path` atomically. With `overwrite == false` an existing file is an
/// error and is left untouched.
pub fn write_atomic(path: &Path, bytes: &[u8], overwrite: bool) -> Result<(), OutputError> {
    let err = |source| OutputError::Write {
        path: path.display().to_string(),
        source,
    };
    if !overwrite && path.exists() {
        return Err(OutputError::Exists {
            path: path.display().to_string(),
        });
    }
    let tmp = tmp_path(path);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        if overwrite {
            std::fs::rename(&tmp, path)
        } else {
            // A hard link never replaces an existing file: no-clobber without a race.
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => std::fs::remove_file(&tmp),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
                Err(_) => std::fs::rename(&tmp, path),
            }
        }
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            return Err(OutputError::Exists {
                path: path.display().to_string(),
            });
        }
        return Err(err(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_to_clobber_unless_asked() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.json");
        write_atomic(&p, b"one", false).unwrap();
        assert!(matches!(
            write_atomic(&p, b"two", false),
            Err(OutputError::Exists { .. })
        ));
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two", true).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let leftovers = std::fs::read_dir(d.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
    }

    #[test]
    fn unwritable_directory_is_an_error() {
        let e = write_atomic(Path::new("/nonexistent-dir/x"), b"", false).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/x"));
    }
}
