//! Files beneath one directory, reached from its descriptor one name at a time with `openat` and
//! `O_NOFOLLOW`, so the kernel refuses every symlink on the way: dangling or not, to a file or a
//! directory, last or in a parent, there before the call or planted during it.
//! Invariant: no path is resolved as a whole, and nothing is checked before it is used: the open
//! that is used is the check, so there is no gap between them to race.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use std::os::unix::ffi::OsStrExt;

use rustix::fs::{
    AtFlags, CWD, Dir, FileType, Mode, OFlags, RenameFlags, mkdirat, openat, renameat_with, statat,
    unlinkat,
};
use rustix::io::Errno;

/// What a file or directory made costs against the quota besides its contents: one block, so
/// that empty files and directories cannot use up the disk's inodes for free.
pub(super) const ENTRY_BYTES: u64 = 4096;

/// Why an operation beneath the directory did not happen.
#[derive(Debug, thiserror::Error)]
pub(super) enum BeneathError {
    /// A name on the way is a symlink (never followed).
    #[error("a symlink is on the path")]
    Symlink,
    /// The name is something other than a regular file (a FIFO, a socket, a device).
    #[error("not a regular file")]
    NotAFile,
    /// The file has other hard links, which could be anywhere on the filesystem.
    #[error("the file has other hard links")]
    Linked,
    /// The file is larger than the reader takes.
    #[error("the file is {size} bytes")]
    TooLarge { size: u64 },
    /// The write would take the directory over its quota.
    #[error("would hold {needed} bytes, over the quota of {quota}")]
    OverQuota { needed: u64, quota: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<Errno> for BeneathError {
    fn from(errno: Errno) -> Self {
        BeneathError::Io(errno.into())
    }
}

/// A quota and the bytes charged against it: file contents plus `ENTRY_BYTES` per file and
/// directory made.
#[derive(Debug)]
pub(super) struct Budget<'a> {
    /// 0: no quota.
    pub quota: u64,
    pub used: &'a mut u64,
}

impl Budget<'_> {
    /// Whether replacing a charge of `old` bytes by `new` keeps within the quota.
    fn check(&self, old: u64, new: u64) -> Result<(), BeneathError> {
        let needed = self.used.saturating_sub(old).saturating_add(new);
        if self.quota != 0 && new > old && needed > self.quota {
            return Err(BeneathError::OverQuota {
                needed,
                quota: self.quota,
            });
        }
        Ok(())
    }

    /// Replaces a charge of `old` bytes by `new`.
    fn charge(&mut self, old: u64, new: u64) {
        *self.used = self.used.saturating_sub(old).saturating_add(new);
    }
}

/// A file or directory in a listing: its name and `file`, `dir`, `symlink` or `other` (a link is
/// reported, never followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub name: String,
    pub kind: &'static str,
}

/// Writes `content` to the file `parts` names beneath `root`, making missing parent directories
/// (mode 0700) and the file (mode 0600), within the budget.
pub(super) fn write(
    root: &Path,
    parts: &[OsString],
    content: &[u8],
    budget: &mut Budget<'_>,
) -> Result<(), BeneathError> {
    let Some((leaf, parents)) = parts.split_last() else {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput).into());
    };
    let mut dir = open_root(root)?;
    for part in parents {
        dir = match open_dir(&dir, part) {
            Err(BeneathError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                budget.check(0, ENTRY_BYTES)?;
                match mkdirat(&dir, part.as_os_str(), Mode::RWXU) {
                    Ok(()) => budget.charge(0, ENTRY_BYTES),
                    // Made meanwhile by another writer (it paid for it).
                    Err(Errno::EXIST) => {}
                    Err(errno) => return Err(errno.into()),
                }
                open_dir(&dir, part)?
            }
            other => other?,
        };
    }
    // What the file costs now: nothing if it is new. A symlink or a directory under the name is
    // refused here; the open below refuses one planted after this look all the same.
    let old = match statat(&dir, leaf.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => ENTRY_BYTES.saturating_add(stat.st_size.unsigned_abs()),
            FileType::Symlink => return Err(BeneathError::Symlink),
            FileType::Directory => {
                return Err(std::io::Error::from(std::io::ErrorKind::IsADirectory).into());
            }
            _ => return Err(BeneathError::NotAFile),
        },
        Err(Errno::NOENT) => 0,
        Err(errno) => return Err(errno.into()),
    };
    let new = ENTRY_BYTES.saturating_add(content.len() as u64);
    budget.check(old, new)?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let fd = openat(
        &dir,
        leaf.as_os_str(),
        flags | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )
    .map_err(|errno| symlink_or(errno, &dir, leaf))?;
    let mut file = checked_file(fd)?;
    let written = file.set_len(0).and_then(|()| file.write_all(content));
    // Charged for what is there now, whether or not the write went through.
    let size = file.metadata().map_or(0, |m| m.len());
    budget.charge(old, ENTRY_BYTES.saturating_add(size));
    written.map_err(BeneathError::from)
}

/// Reads the file `parts` names beneath `root`, if it holds at most `max` bytes.
pub(super) fn read(root: &Path, parts: &[OsString], max: u64) -> Result<Vec<u8>, BeneathError> {
    let Some((leaf, parents)) = parts.split_last() else {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput).into());
    };
    let dir = walk(open_root(root)?, parents)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = openat(&dir, leaf.as_os_str(), flags, Mode::empty())
        .map_err(|errno| symlink_or(errno, &dir, leaf))?;
    let file = checked_file(fd)?;
    let size = file.metadata()?.len();
    if size > max {
        return Err(BeneathError::TooLarge { size });
    }
    let mut bytes = Vec::new();
    // A file that grew since the size was read is cut at one byte past the limit, and refused.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(BeneathError::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// The entries of the directory `parts` names beneath `root` (the root itself when empty), at
/// most `max`, in no particular order.
pub(super) fn list(
    root: &Path,
    parts: &[OsString],
    max: usize,
) -> Result<Vec<Entry>, BeneathError> {
    let dir = walk(open_root(root)?, parts)?;
    let entries = names(&dir, max)?
        .into_iter()
        .map(|(name, kind)| {
            let kind = match kind {
                FileType::RegularFile => "file",
                FileType::Directory => "dir",
                FileType::Symlink => "symlink",
                _ => "other",
            };
            let name = String::from_utf8_lossy(name.as_bytes()).into_owned();
            Entry { name, kind }
        })
        .collect();
    Ok(entries)
}

/// Removes `root` and everything beneath it, holding at most three descriptors whatever the
/// tree's depth: `remove_dir_all` holds one per level, so a deep tree failed under a low file
/// limit and stayed on disk. Each directory is emptied of its files, its subdirectories are
/// moved up into `root` (a rename within the tree, under a fresh name) to be emptied in turn,
/// and then it is removed. Symlinks are removed, never followed. A missing `root` is no error.
pub(crate) fn remove_all(root: &Path) -> Result<(), BeneathError> {
    let top = match open_root(root) {
        Ok(fd) => fd,
        Err(BeneathError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    let mut moved: u64 = 0;
    loop {
        let entries = names(&top, usize::MAX)?;
        if entries.is_empty() {
            break;
        }
        for (name, kind) in entries {
            if kind != FileType::Directory {
                gone(unlinkat(&top, name.as_os_str(), AtFlags::empty()))?;
                continue;
            }
            let dir = match open_dir(&top, &name) {
                Ok(dir) => dir,
                Err(BeneathError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            for (child, kind) in names(&dir, usize::MAX)? {
                if kind == FileType::Directory {
                    moved = lift(&dir, &child, &top, moved)?;
                } else {
                    gone(unlinkat(&dir, child.as_os_str(), AtFlags::empty()))?;
                }
            }
            drop(dir);
            gone(unlinkat(&top, name.as_os_str(), AtFlags::REMOVEDIR))?;
        }
    }
    drop(top);
    match std::fs::remove_dir(root) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Moves the directory `name` from `dir` into `top` under a fresh name (`.removing-<n>`);
/// answers the next number to try.
fn lift(dir: &OwnedFd, name: &OsStr, top: &OwnedFd, mut n: u64) -> Result<u64, BeneathError> {
    loop {
        n += 1;
        let fresh = format!(".removing-{n}");
        match renameat_with(dir, name, top, fresh.as_str(), RenameFlags::NOREPLACE) {
            Ok(()) | Err(Errno::NOENT) => return Ok(n),
            Err(Errno::EXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// The names in `dir` but `.` and `..` (at most `max`), with what each is, never following a
/// link: a symlink is a symlink. A name gone meanwhile is left out.
fn names(dir: &OwnedFd, max: usize) -> Result<Vec<(OsString, FileType)>, BeneathError> {
    let mut names = Vec::new();
    for entry in Dir::read_from(dir)? {
        if names.len() >= max {
            break;
        }
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            // Some filesystems do not say in the listing; ask, without following a link.
            kind = match statat(dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                Err(Errno::NOENT) => continue,
                Err(errno) => return Err(errno.into()),
            };
        }
        names.push((OsStr::from_bytes(name).to_owned(), kind));
    }
    Ok(names)
}

/// A removal whose target is already gone did its job.
fn gone(removed: rustix::io::Result<()>) -> Result<(), BeneathError> {
    match removed {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// The root directory itself; its last component must not be a symlink either.
fn open_root(root: &Path) -> Result<OwnedFd, BeneathError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    openat(CWD, root, flags, Mode::empty())
        .map_err(|errno| symlink_or(errno, CWD, root.as_os_str()))
}

/// The directory `parts` names beneath `dir`, entered one name at a time.
fn walk(mut dir: OwnedFd, parts: &[OsString]) -> Result<OwnedFd, BeneathError> {
    for part in parts {
        dir = open_dir(&dir, part)?;
    }
    Ok(dir)
}

/// The directory `name` in `dir`, which must be a directory and not a symlink.
fn open_dir(dir: &OwnedFd, name: &OsStr) -> Result<OwnedFd, BeneathError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    openat(dir, name, flags, Mode::empty()).map_err(|errno| symlink_or(errno, dir, name))
}

/// An open that failed: because `name` is a symlink (which `O_NOFOLLOW` refuses with ELOOP, or
/// with ENOTDIR beside `O_DIRECTORY`), or for the reason the kernel gave.
fn symlink_or(errno: Errno, dir: impl AsFd, name: &OsStr) -> BeneathError {
    if matches!(errno, Errno::LOOP | Errno::NOTDIR)
        && statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink)
    {
        return BeneathError::Symlink;
    }
    errno.into()
}

/// An opened name as a file, if it is a regular file with no other hard links.
fn checked_file(fd: OwnedFd) -> Result<File, BeneathError> {
    let file = File::from(fd);
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(std::io::Error::from(std::io::ErrorKind::IsADirectory).into());
    }
    if !meta.is_file() {
        return Err(BeneathError::NotAFile);
    }
    if meta.nlink() > 1 {
        return Err(BeneathError::Linked);
    }
    Ok(file)
}
