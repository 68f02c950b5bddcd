//! Safe output: every file is written to a temporary sibling and then moved into place,
//! so an interrupted run never leaves a truncated file; an existing file is kept unless
//! the caller asks to overwrite it; a set of files ([`write_set`]: `--out` folders) is
//! written whole or not at all. Safe input: [`read_text`] reads regular files of a
//! bounded size only.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path} exists; pass --force to overwrite it")]
    Exists { path: String },
    #[error(
        "{path} is not a regular file (a symlink, a device, a FIFO or a folder); outputs only replace regular files, even with --force"
    )]
    NotRegular { path: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The largest config file read (models, profiles, scenarios, sweep files, topology
/// dumps): real ones are kilobytes.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;
/// The largest data file read (timelines, sweep outputs, run records): a step's
/// timeline is hundreds of megabytes.
pub const MAX_DATA_BYTES: u64 = 4 << 30;

/// The text of the regular file `path`, if it holds at most `limit` bytes. A FIFO, a
/// device (`/dev/zero`) or a folder is refused before it is opened, so nothing blocks or
/// reads without end; a larger file is refused as not what was meant.
pub fn read_text(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a folder, a FIFO or a device)",
        ));
    }
    if meta.len() > limit {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} bytes, more than the {} this kind of file may have",
                meta.len(),
                limit
            ),
        ));
    }
    let mut text = String::new();
    // The file may grow between the check and the read: read at most one byte more.
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("more than the {limit} bytes this kind of file may have"),
        ));
    }
    Ok(text)
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

/// A file's contents, written into its staged file when its turn comes: a set of large
/// outputs (a trace and timelines of gigabytes) is then made one file at a time, straight
/// to disk, instead of all in memory before the first is written.
pub type Render<'a> = Box<dyn FnOnce(&mut dyn Write) -> std::io::Result<()> + 'a>;

/// The render of bytes already made.
pub fn bytes<'a>(b: &'a [u8]) -> Render<'a> {
    Box::new(move |w| w.write_all(b))
}

/// The render of text already made, which it owns.
pub fn text<'a>(t: String) -> Render<'a> {
    Box::new(move |w| w.write_all(t.as_bytes()))
}

/// Write `bytes` to `path` atomically. With `overwrite == false` an existing file is an
/// error and is left untouched.
pub fn write_atomic(path: &Path, bytes: &[u8], overwrite: bool) -> Result<(), OutputError> {
    write_atomic_with(path, self::bytes(bytes), overwrite)
}

/// [`write_atomic`] of a file made by `render` as it is written.
pub fn write_atomic_with(path: &Path, render: Render, overwrite: bool) -> Result<(), OutputError> {
    write_paths(vec![(path.to_path_buf(), render)], overwrite)
}

/// Write a set of files into `dir` whole or not at all: every target is checked first
/// (a non-regular file is refused; without `overwrite` an existing one is an error and
/// nothing is written), every file is written in full to a temporary sibling (where a
/// full disk or a quota fails), and only then are they moved into place. A failure
/// before the moves removes the temporaries and leaves the folder as it was; the moves
/// themselves are renames within one folder.
pub fn write_set<B: AsRef<[u8]>>(
    dir: &Path,
    files: &[(String, B)],
    overwrite: bool,
) -> Result<(), OutputError> {
    let renders: Vec<(String, Render)> = files
        .iter()
        .map(|(n, b)| (n.clone(), bytes(b.as_ref())))
        .collect();
    write_set_with(dir, renders, overwrite)
}

/// [`write_set`] of files each made by its [`Render`] as it is staged, in order.
pub fn write_set_with(
    dir: &Path,
    files: Vec<(String, Render)>,
    overwrite: bool,
) -> Result<(), OutputError> {
    write_paths(
        files.into_iter().map(|(n, r)| (dir.join(n), r)).collect(),
        overwrite,
    )
}

/// [`write_set_with`] of whole paths (one of them: [`write_atomic_with`]).
fn write_paths(files: Vec<(PathBuf, Render)>, overwrite: bool) -> Result<(), OutputError> {
    for (path, _) in &files {
        // The rename below would replace whatever is there: a symlink (not its target),
        // a device node such as /dev/null, a FIFO. Only a regular file may be replaced.
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.file_type().is_file()
        {
            return Err(OutputError::NotRegular {
                path: path.display().to_string(),
            });
        }
        if !overwrite && path.exists() {
            return Err(OutputError::Exists {
                path: path.display().to_string(),
            });
        }
    }
    let mut staged: Vec<PathBuf> = Vec::with_capacity(files.len());
    let cleanup = |staged: &[PathBuf]| {
        for t in staged {
            let _ = std::fs::remove_file(t);
        }
    };
    let mut paths: Vec<PathBuf> = Vec::with_capacity(files.len());
    for (path, render) in files {
        let tmp = tmp_path(&path);
        let r = (|| {
            let f = std::fs::File::create(&tmp)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            render(&mut w)?;
            let f = w.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()
        })();
        if let Err(source) = r {
            let _ = std::fs::remove_file(&tmp);
            cleanup(&staged);
            return Err(OutputError::Write {
                path: path.display().to_string(),
                source,
            });
        }
        staged.push(tmp);
        paths.push(path);
    }
    let mut placed: Vec<&PathBuf> = Vec::new();
    for (i, (tmp, path)) in staged.iter().zip(&paths).enumerate() {
        let r = if overwrite {
            std::fs::rename(tmp, path)
        } else {
            // A hard link never replaces an existing file (one created since the
            // check): no-clobber without a race.
            match std::fs::hard_link(tmp, path) {
                Ok(()) => std::fs::remove_file(tmp),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
                Err(_) => std::fs::rename(tmp, path),
            }
        };
        if let Err(e) = r {
            // Without overwrite the files placed so far are ours and new: take them back.
            if !overwrite {
                for p in &placed {
                    let _ = std::fs::remove_file(p);
                }
            }
            cleanup(&staged[i..]);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                return Err(OutputError::Exists {
                    path: path.display().to_string(),
                });
            }
            return Err(OutputError::Write {
                path: path.display().to_string(),
                source: e,
            });
        }
        placed.push(path);
    }
    Ok(())
}

/// `render`'s output gzip-compressed on its way to the file.
pub fn gzipped(render: Render<'_>) -> Render<'_> {
    Box::new(move |w| {
        let mut e = flate2::write::GzEncoder::new(w, flate2::Compression::default());
        render(&mut e)?;
        e.finish().map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output never replaces what is not a regular file, even when asked to
    /// overwrite: not a symlink (nor its target), not a device node.
    #[test]
    fn outputs_replace_regular_files_only() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target.txt");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("link.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for overwrite in [false, true] {
            let e = write_atomic(&link, b"new", overwrite).unwrap_err();
            assert!(matches!(e, OutputError::NotRegular { .. }), "{e}");
        }
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        let e = write_atomic(d.path(), b"x", true).unwrap_err();
        assert!(matches!(e, OutputError::NotRegular { .. }), "{e}");
        // A regular file is still replaced with overwrite.
        write_atomic(&target, b"new", true).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    }

    /// Only regular files of a bounded size are read: a folder and a device are refused
    /// before any byte is read (so `/dev/zero` cannot fill memory), and so is a file over
    /// the limit.
    #[test]
    fn read_text_reads_bounded_regular_files_only() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.toml");
        std::fs::write(&f, "x = 1\n").unwrap();
        assert_eq!(read_text(&f, 16).unwrap(), "x = 1\n");
        let e = read_text(&f, 3).unwrap_err().to_string();
        assert!(e.contains("more than the 3"), "{e}");
        let e = read_text(d.path(), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        if std::path::Path::new("/dev/zero").exists() {
            let e = read_text(std::path::Path::new("/dev/zero"), 1 << 20)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
        assert!(read_text(&d.path().join("missing"), 16).is_err());
    }

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
    fn a_set_is_written_whole_or_not_at_all() {
        let d = tempfile::tempdir().unwrap();
        let files = vec![
            ("a.txt".to_string(), "new a".to_string()),
            ("b.txt".to_string(), "new b".to_string()),
        ];
        // b exists: without overwrite nothing is written, a included.
        std::fs::write(d.path().join("b.txt"), "old b").unwrap();
        assert!(matches!(
            write_set(d.path(), &files, false),
            Err(OutputError::Exists { .. })
        ));
        assert!(!d.path().join("a.txt").exists());
        assert_eq!(
            std::fs::read_to_string(d.path().join("b.txt")).unwrap(),
            "old b"
        );
        // A target that is a folder: refused before anything is written.
        std::fs::create_dir(d.path().join("c.txt")).unwrap();
        let mut three = files.clone();
        three.push(("c.txt".to_string(), "c".to_string()));
        assert!(matches!(
            write_set(d.path(), &three, true),
            Err(OutputError::NotRegular { .. })
        ));
        assert!(!d.path().join("a.txt").exists());
        // With overwrite: both, and no temporary left.
        write_set(d.path(), &files, true).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("b.txt")).unwrap(),
            "new b"
        );
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // An unwritable folder: an error, nothing placed.
        let gone = d.path().join("missing");
        assert!(matches!(
            write_set(&gone, &files, true),
            Err(OutputError::Write { .. })
        ));
    }

    /// Files made as they are written: each in turn, straight into its staged file; a
    /// render that fails midway (a full disk, say) leaves no file, new or staged, and
    /// the folder as it was. Gzip on the way decodes to what was rendered.
    #[test]
    fn rendered_files_are_staged_in_turn_and_a_failure_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.txt"), "old b").unwrap();
        let order = std::cell::RefCell::new(Vec::new());
        let files: Vec<(String, Render)> = vec![
            (
                "a.txt".into(),
                Box::new(|w| {
                    order.borrow_mut().push("a");
                    w.write_all(b"new a")
                }),
            ),
            (
                "b.txt".into(),
                Box::new(|w| {
                    order.borrow_mut().push("b");
                    w.write_all(b"half of b")?;
                    Err(std::io::Error::other("disk full"))
                }),
            ),
        ];
        let e = write_set_with(d.path(), files, true).unwrap_err();
        assert!(matches!(e, OutputError::Write { .. }), "{e}");
        assert_eq!(*order.borrow(), ["a", "b"]);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["b.txt"], "only the old file is left");
        assert_eq!(
            std::fs::read_to_string(d.path().join("b.txt")).unwrap(),
            "old b"
        );
        let gz = d.path().join("t.json.gz");
        write_atomic_with(&gz, gzipped(bytes(b"{\"x\":1}")), false).unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "{\"x\":1}");
    }

    #[test]
    fn unwritable_directory_is_an_error() {
        let e = write_atomic(Path::new("/nonexistent-dir/x"), b"", false).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/x"));
    }
}
