#!/usr/bin/python3
"""A disk that turns read-only under open files, and writable again: a FUSE passthrough for the fault tests.

    rofs.py BACKING_DIR MOUNTPOINT CONTROL_FILE

Mounts MOUNTPOINT as a passthrough of BACKING_DIR (foreground; unmount it to
stop). While CONTROL_FILE exists, every operation that would change the file
system fails with EROFS, including write() on descriptors opened before:
what a real disk does when it goes read-only (ext4 with errors=remount-ro
after an I/O error). Remove CONTROL_FILE and writes work again.

Why not a real file system: Linux refuses `mount -o remount,ro` (EBUSY) while
any file is open for writing on it, as knapd's database and the pods' logs
always are; and ext4's own emergency read-only (`/sys/fs/ext4/<dev>/
trigger_fs_error`) is sticky on current kernels: only an unmount clears it,
which the pods' open logs prevent. A passthrough whose writes start and stop
failing is the only reversible read-only disk with writers open.

Kernel caching is kept to what stays coherent with one mount (FUSE's page
cache is write-through: each write() reaches write() below and gets its error).
"""
import errno
import os
import sys

from fusepy import FUSE, FuseOSError, Operations  # Debian python3-fusepy (tools/packages/base.test)


class ReadOnlySwitch(Operations):
    def __init__(self, root, control):
        self.root, self.control = root, control

    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def _writable(self):
        if os.path.exists(self.control):
            raise FuseOSError(errno.EROFS)

    def __call__(self, op, *args):
        try:
            return super().__call__(op, *args)
        except OSError as e:
            if isinstance(e, FuseOSError):
                raise
            raise FuseOSError(e.errno or errno.EIO)

    # Reading.
    def access(self, path, mode):
        if not os.access(self._path(path), mode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path)) if fh is None else os.fstat(fh)
        return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink",
                                            "st_size", "st_uid", "st_ino")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._path(path))

    def readlink(self, path):
        return os.readlink(self._path(path))

    def statfs(self, path):
        st = os.statvfs(self._path(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}

    def open(self, path, flags):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC):
            self._writable()
        return os.open(self._path(path), flags)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def release(self, path, fh):
        os.close(fh)

    def flush(self, path, fh):
        return 0

    # Writing: EROFS while the switch is on.
    def write(self, path, data, offset, fh):
        self._writable()
        return os.pwrite(fh, data, offset)

    def fsync(self, path, datasync, fh):
        self._writable()
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)

    def truncate(self, path, length, fh=None):
        self._writable()
        if fh is None:
            os.truncate(self._path(path), length)
        else:
            os.ftruncate(fh, length)

    def create(self, path, mode, fi=None):
        self._writable()
        # Read-write whatever was asked: the kernel reads through this descriptor too (a shared mmap, as
        # SQLite's -shm file, pages in with it; a write-only one would SIGBUS the mapper).
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT, mode)

    def mkdir(self, path, mode):
        self._writable()
        os.mkdir(self._path(path), mode)

    def mknod(self, path, mode, dev):
        self._writable()
        os.mknod(self._path(path), mode, dev)

    def rmdir(self, path):
        self._writable()
        os.rmdir(self._path(path))

    def unlink(self, path):
        self._writable()
        os.unlink(self._path(path))

    def rename(self, old, new):
        self._writable()
        os.rename(self._path(old), self._path(new))

    def link(self, target, source):
        self._writable()
        os.link(self._path(source), self._path(target))

    def symlink(self, target, source):
        self._writable()
        os.symlink(source, self._path(target))

    def chmod(self, path, mode):
        self._writable()
        os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        self._writable()
        os.lchown(self._path(path), uid, gid)

    def utimens(self, path, times=None):
        self._writable()
        os.utime(self._path(path), times, follow_symlinks=False)


def main():
    backing, mountpoint, control = sys.argv[1:4]
    # allow_other: knapd, containerd's shims and `knap logs` are other processes (root bypasses nothing here).
    FUSE(ReadOnlySwitch(os.path.realpath(backing), control), mountpoint, foreground=True, nothreads=False,
         allow_other=True, default_permissions=True, use_ino=True, attr_timeout=0, entry_timeout=0,
         negative_timeout=0)


if __name__ == "__main__":
    main()
