// Package merge is Lockstep's three-way merge engine on git objects, in
// gitobj's types. It has no HTTP and no database and imports neither
// go-git nor an object-store adapter (deps_test.go): callers hand it a
// Store (what gitobj.Reader.Objects returns, or go-git's memory.Storage
// in tests) and commit or tree oids.
//
// # API
//
//   - Store: the three object methods the engine uses (read, has, write).
//   - Overlay, NewOverlay, (*Overlay).Objects: a Store that reads through
//     to a base and keeps writes in memory. A preflight is a merge into an
//     Overlay that is then dropped; to materialize, write Objects() as one
//     pack, then move refs.
//   - MergeBase, MergeBases: the merge base of two commits.
//   - Merge (commits) and MergeTrees (trees), with Options, returning a
//     Result with Conflicts (Conflict, Hunk, LineRange carry JSON tags for
//     the HTTP API).
//   - Diff3: the line merge of three byte slices, with Labels.
//
// Errors are lockstep errors: not_found for a missing commit, tree or blob,
// invalid_argument for bad options; ctx.Err() when cancelled; anything
// else is internal. A merge with conflicts is not an error: it is a Result
// with Clean false (the service decides whether that is merge_conflict).
//
// # Merge base
//
// MergeBases is git's paint-down walk (paint_down_to_common): both
// histories are walked newest first by committer time, each commit painted
// with the sides it is reachable from; a commit reached from both is a
// candidate and everything below it is stale; the walk stops when only
// stale commits are queued, so it reads only the recent history. Like git
// without a commit-graph it trusts commit times. Candidates reachable from
// another candidate are dropped (a full walk, criss-cross histories only).
//
// When several best candidates remain (criss-cross merges), MergeBase does
// what git's recursive strategy does: the candidates, oldest first
// (committer time, then oid), are merged pairwise, each pair against its
// own merge base (recursively), with the rules of git's inner merges:
// deep merge, conflict markers kept in the result and two characters
// longer (9), labels "Temporary merge branch 1" and "... 2", the base
// version kept for modify/delete, file-type and binary conflicts. Each step is
// recorded as a virtual commit (parents: the pair; author "lockstep"; time:
// the newer parent's), so the result is deterministic. Without a common
// ancestor the empty tree is the base.
//
// # Tree merge
//
// Trees are merged top-down and only where the three oids differ: when
// ours == theirs, or one side equals the base, that side's subtree is taken
// without being read, so a merge touching a few files of a large repository
// reads only the trees on the paths to those files. For each name changed
// differently on both sides, the directory part and the file part are
// merged separately (as git's index sees "a" and "a/..."):
//
//   - both deleted, or identical changes: clean;
//   - one side deleted, the other changed: modify-delete (the changed file
//     stays in the tree written with Markers, like git);
//   - both added different contents: add-add (with Deep a line merge
//     against an empty base, as git does, which refines it to the differing
//     lines);
//   - regular file vs symlink vs submodule: type; as in git the regular
//     file moves aside to "name~<label>" (both sides move if neither is a
//     regular file);
//   - a file and a directory at one path: type; the directory stays and
//     the file is stored beside it as "name~<label>", like git;
//   - modes (644/755) merge on their own: a mode change on one side and a
//     content change on the other is clean; two different new modes
//     conflict (mode);
//   - contents changed on both sides: without Options.Deep a content
//     conflict; with it a line merge (Diff3) unless a version is binary (a
//     NUL in the first 8000 bytes, like git), bigger than MaxFileBytes, a
//     symlink or a submodule, which conflict and keep ours.
//
// New trees are encoded by the engine in git's order and format (as git
// and go-git's object.Tree write them), so their oids equal git's; empty
// directories disappear as in git. New objects go to an internal Overlay
// first and only the ones reachable from the result tree reach the
// Store, and only when the merge is clean or Options.Markers is set.
//
// # Line merge
//
// Diff3 is git's xdiff merge (xdl_merge), written from reading xdiff, at
// the level git merge and git merge-tree use ("zealous"). The edit scripts
// base→ours and base→theirs come from git's histogram diff (xhistogram.c:
// split around the longest common run of lines rare in the base region,
// recursively; a region whose common lines all occur more than 64 times
// falls back to xdiff's classic diff, which trims common ends, discards
// unmatched and frequent lines and runs Myers with xdiff's cost
// heuristics), then xdl_change_compact (groups slid down, then up to meet
// a change in the other file; no indent heuristic: merges never set it).
// Labels.Algorithm = Myers uses the classic diff throughout, as git
// merge-file does up to git 2.43. Changes that overlap or touch (adjacent
// lines) conflict unless identical; conflicts are then refined by diffing
// the two sides (identical ones dissolve, the rest shrink to the lines
// that differ) and conflicts fewer than four lines apart are joined.
// Markers follow git byte for byte: CRLF markers when the surrounding
// lines use CRLF, a newline added after a side that ends without one,
// diff3 style (Labels.ShowBase) without refinement. The oracle tests
// compare every byte with git merge-tree and git merge-file.
//
// # Renames
//
// Unless Options.NoRenames, renames are detected as git's merge-ort does
// (rename.go, rename_merge.go): each side's deleted and added files are
// paired by diffcore-rename's rules — exact renames (same blob; an unused
// source with the same basename first), then unique basenames at 75%
// similarity, then the similarity matrix at 50% (four candidates per
// destination; score, then basename, then order) bounded by
// Options.RenameLimit² pairs — with git's similarity estimate (span hashes
// of LF- or 64-byte-delimited chunks). Only relevant sources (the other
// side changed the file, or added files in a directory this side removed)
// enter the basename and matrix steps, and a side without any is not
// searched, as in merge-ort. A quick walk of the subtrees all three
// versions disagree on finds whether any source can be relevant before
// the full walk, so merges without renames read no more trees.
//
// The renames are then applied as merge-ort's process_renames: each path
// a rename touches gets its three versions moved (base and other side
// from the old path) and is decided by the tree walk at its new path;
// rename/rename (1to2), rename/delete, rename/add, rename/rename (2to1)
// and rename vs type change give the same result tree and conflicted paths
// as git. Directory renames (outer merges only, merge.directoryRenames=
// conflict): a removed directory maps to where most of its renamed files
// went; files the other side added or renamed into it move along and
// conflict (KindDirectoryRename).
//
// # Where we differ from git
//
//   - Renames: git's directory-rename hints in basename matching and its
//     early culling of sources needed only for directory renames are not
//     done, and location-relevant sources are approximated; a directory
//     rename without a majority, or one that would put two files on one
//     path or onto an existing file, leaves the files in place and the
//     merge clean (git reports it unclean without naming a path); markers
//     in a renamed file use the plain labels (git writes "branch:path").
//   - A file moved aside by a file/directory or type conflict is reported
//     at its own path (git reports "name~<branch>").
//   - Submodules are never merged (git tries a fast-forward of the
//     submodule commit).
//   - Hunk.Base of a refined conflict covers the whole unrefined conflict
//     (git does not track it).
//   - A histogram region with 64 distinct lines in one hash chain makes
//     git's merge fail; Diff3 reports the whole file as one conflict.
//   - Virtual bases follow git's inner-merge rules for content,
//     modify/delete, file-type and binary conflicts; a file/directory
//     conflict between merge bases is resolved as in an outer merge.
package merge
