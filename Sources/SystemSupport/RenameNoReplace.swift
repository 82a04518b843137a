internal import CSystemShims

/// Gives `old` (in `oldDirectory`) the name `new` (in `newDirectory`) only if that name does not
/// exist, atomically: `renameat2(RENAME_NOREPLACE)`. False with `errno` set on failure: `EEXIST`
/// when the name exists, `EINVAL` on a file system that does not offer it.
func renameNoReplace(_ oldDirectory: Int32, _ old: String, _ newDirectory: Int32, _ new: String) -> Bool {
    dc_rename_noreplace(oldDirectory, old, newDirectory, new) == 0
}
