"""Which tar members the platform's tar readers accept: regular files named `<key>.<field>`, nothing else.

The readers never extract to disk (members are read into memory by name), but a hostile or damaged shard
could still hold a member named `../x`, `/etc/passwd` or `a/b.npy`, or a symlink/hard link whose data
`tarfile.extractfile` would take from another member; such a name would also be a path to any tool that
does extract the shard (`tar -x`, webdataset's cache). The platform writes none of these, so any one of
them means the file is not what the index describes: refused, with the member and the shard named.
"""

from __future__ import annotations

import tarfile


class UnsafeTarMember(ValueError):
    """A tar member that is not a plain `<key>.<field>` file (the message names the shard and member)."""


def member_key_and_field(member: tarfile.TarInfo, shard: str) -> tuple[str, str]:
    """(key, field) of a member named `<key>.<field>`; anything else is refused."""
    name = member.name
    if not member.isreg():
        kind = ("symlink" if member.issym() else "hard link" if member.islnk() else
                "directory" if member.isdir() else "special file")
        target = f" to {member.linkname!r}" if member.linkname else ""
        raise UnsafeTarMember(f"{shard}: tar member {name!r} is a {kind}{target}; shards hold regular files only")
    key, dot, field = name.partition(".")
    if "/" in name or "\\" in name or not key or not dot or not field or name.startswith("."):
        raise UnsafeTarMember(f"{shard}: tar member {name!r} is not a plain <key>.<field> name (no directories, "
                              f"no '..', no absolute path)")
    return key, field
