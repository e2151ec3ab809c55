//! `StderrTo`: sends the process's stderr to a file while a plugin starts up.

/// Redirects the process's stderr (fd 2) to a file until dropped. Output other threads write
/// to stderr meanwhile goes to the file too, so it is held only around plugin start-up.
pub(crate) struct StderrTo {
    saved: libc::c_int,
}

impl StderrTo {
    /// `None` (stderr untouched) when the file cannot be opened.
    pub(crate) fn file(path: &std::path::Path) -> Option<StderrTo> {
        use std::os::fd::IntoRawFd;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).ok()?;
        let fd = file.into_raw_fd();
        // SAFETY: plain descriptor calls on descriptors this function owns (`fd`, the
        // duplicate `saved`) and on 2, which the drop restores.
        unsafe {
            let saved = libc::dup(2);
            if saved < 0 {
                libc::close(fd);
                return None;
            }
            let ok = libc::dup2(fd, 2) >= 0;
            libc::close(fd);
            if !ok {
                libc::close(saved);
                return None;
            }
            Some(StderrTo { saved })
        }
    }
}

impl Drop for StderrTo {
    fn drop(&mut self) {
        // SAFETY: restores the descriptor saved by `file` and closes the copy.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
    }
}
