// The incremental push, over the same wire protocol as the Go client
// (client/push.go) and the Python client's push_dir:
//
//  1. scan the directory into git blob and tree objects (the tree
//     `git add -A && git write-tree` would build: modes 100644/100755/120000,
//     entries in git's order, no empty directories, `.git` and `.lockstep`
//     skipped);
//  2. ask `POST objects/missing` which objects the server lacks, top-down,
//     one batch per tree level, never descending into a tree the server
//     has (it keeps only connected objects);
//  3. upload those objects as one version 2 packfile (`POST objects`,
//     undeltified, zlib-compressed), re-reading each file and refusing one
//     that changed since the scan;
//  4. commit the root tree with compare-and-swap (`PUT worktree?tree=`).

import { createHash } from "node:crypto";
import { lstatSync, readdirSync, readFileSync, readlinkSync, type Stats } from "node:fs";
import { dirname, isAbsolute, join, normalize, resolve, sep } from "node:path";
import { deflateSync } from "node:zlib";
import { InvalidArgument, LockstepError } from "./errors.js";

export const ZERO_OID = "0".repeat(40);
/** Object ids per objects/missing request, as the Go client. */
export const BATCH = 4096;

export const MODE_FILE = "100644";
export const MODE_EXEC = "100755";
export const MODE_LINK = "120000";
export const MODE_TREE = "40000";

export interface TreeEntry { name: string; mode: string; oid: string }

/** The git object id of `data` as an object of `kind`. */
export function objectId(kind: "blob" | "tree" | "commit", data: Uint8Array): string {
  const h = createHash("sha1");
  h.update(`${kind} ${data.length}\0`);
  h.update(data);
  return h.digest("hex");
}

function sortKey(e: TreeEntry): Buffer {
  return Buffer.from(e.mode === MODE_TREE ? e.name + "/" : e.name, "utf8");
}

/** Encode tree entries in git's order (a tree sorts as its name plus "/"). */
export function treeBytes(entries: TreeEntry[]): Buffer {
  const sorted = [...entries].sort((a, b) => Buffer.compare(sortKey(a), sortKey(b)));
  const parts: Buffer[] = [];
  for (const e of sorted) {
    parts.push(Buffer.from(`${e.mode} ${e.name}\0`, "utf8"), Buffer.from(e.oid, "hex"));
  }
  return Buffer.concat(parts);
}

interface Blob { rel: string; oid: string; linkTarget?: Buffer; size?: number; mtimeMs?: number }

/** A scanned directory: its root tree and every tree and blob under it. */
export interface Snapshot {
  directory: string;
  tree: string;
  trees: Map<string, { entries: TreeEntry[]; data: Buffer }>;
  blobs: Map<string, Blob>;
  files: number;
}

function checkLink(root: string, rel: string, target: string): void {
  if (isAbsolute(target)) throw new InvalidArgument(`symlink ${JSON.stringify(rel)} points to an absolute path ${JSON.stringify(target)}`);
  const r = normalize(join(root, dirname(rel), target));
  if (r !== root && !r.startsWith(root + sep)) {
    throw new InvalidArgument(`symlink ${JSON.stringify(rel)} points outside the directory (${JSON.stringify(target)})`);
  }
}

/** Build the git objects of `directory` (see the module comment). */
export function scan(directory: string): Snapshot {
  const root = resolve(directory);
  let st: Stats;
  try { st = lstatSync(root); } catch { throw new InvalidArgument(`push: ${directory} does not exist`); }
  if (!st.isDirectory()) throw new InvalidArgument(`push: ${directory} is not a directory`);
  const snap: Snapshot = { directory: root, tree: "", trees: new Map(), blobs: new Map(), files: 0 };

  const walk = (absDir: string, relDir: string): string | undefined => {
    const entries: TreeEntry[] = [];
    for (const de of readdirSync(absDir, { withFileTypes: true })) {
      const name = de.name;
      if (name === ".git" || (name === ".lockstep" && de.isDirectory())) continue;
      const rel = relDir ? `${relDir}/${name}` : name;
      const abs = join(absDir, name);
      let fst: Stats;
      try { fst = lstatSync(abs); } catch { continue; } // deleted while we walk
      if (fst.isDirectory()) {
        const sub = walk(abs, rel);
        if (sub !== undefined) entries.push({ name, mode: MODE_TREE, oid: sub });
      } else if (fst.isFile()) {
        const data = readFileSync(abs);
        const oid = objectId("blob", data);
        if (!snap.blobs.has(oid)) snap.blobs.set(oid, { rel, oid, size: fst.size, mtimeMs: fst.mtimeMs });
        snap.files++;
        entries.push({ name, mode: fst.mode & 0o100 ? MODE_EXEC : MODE_FILE, oid });
      } else if (fst.isSymbolicLink()) {
        const target = readlinkSync(abs);
        checkLink(root, rel, target);
        const data = Buffer.from(target, "utf8");
        const oid = objectId("blob", data);
        if (!snap.blobs.has(oid)) snap.blobs.set(oid, { rel, oid, linkTarget: data });
        snap.files++;
        entries.push({ name, mode: MODE_LINK, oid });
      } else {
        throw new InvalidArgument(`${JSON.stringify(rel)} cannot be pushed: only regular files, symlinks and directories can`);
      }
    }
    if (entries.length === 0 && relDir) return undefined; // git stores no empty directories
    const data = treeBytes(entries);
    const oid = objectId("tree", data);
    snap.trees.set(oid, { entries, data });
    return oid;
  };
  snap.tree = walk(root, "") ?? "";
  return snap;
}

export type MissingFunc = (oids: string[]) => Promise<string[]>;

/** The objects of `snap` the server lacks, parents before children. */
export async function plan(snap: Snapshot, missing: MissingFunc): Promise<string[]> {
  const asked = new Set([snap.tree]);
  let level = [snap.tree];
  const out: string[] = [];
  while (level.length > 0) {
    const next: string[] = [];
    for (let i = 0; i < level.length; i += BATCH) {
      const batch = level.slice(i, i + BATCH);
      const batchSet = new Set(batch);
      const seen = new Set<string>();
      for (const h of await missing(batch)) {
        if (!batchSet.has(h)) throw new LockstepError(`server reported ${h} missing, which was not asked about`, { code: "internal" });
        if (seen.has(h)) continue;
        seen.add(h);
        out.push(h);
        for (const e of snap.trees.get(h)?.entries ?? []) {
          if (!asked.has(e.oid)) {
            asked.add(e.oid);
            next.push(e.oid);
          }
        }
      }
    }
    level = next;
  }
  return out;
}

const TYPES = { commit: 1, tree: 2, blob: 3 } as const;

function packHeader(kind: keyof typeof TYPES, size: number): Buffer {
  const out: number[] = [];
  let b = (TYPES[kind] << 4) | (size & 0x0f);
  size = Math.floor(size / 16);
  while (size > 0) {
    out.push(b | 0x80);
    b = size & 0x7f;
    size = Math.floor(size / 128);
  }
  out.push(b);
  return Buffer.from(out);
}

function blobContent(snap: Snapshot, blob: Blob): Buffer {
  if (blob.linkTarget) return blob.linkTarget;
  const path = join(snap.directory, blob.rel);
  let data: Buffer;
  let st: Stats;
  try {
    st = lstatSync(path);
    data = readFileSync(path);
  } catch {
    throw new InvalidArgument(`file changed during push: ${blob.rel}`);
  }
  if (st.size !== blob.size || st.mtimeMs !== blob.mtimeMs || objectId("blob", data) !== blob.oid) {
    throw new InvalidArgument(`file changed during push: ${blob.rel}`);
  }
  return data;
}

/** A version 2 packfile of `oids` (undeltified objects). */
export function writePack(snap: Snapshot, oids: string[]): { pack: Buffer; objects: number } {
  const uniq = [...new Set(oids)];
  const parts: Buffer[] = [];
  const head = Buffer.alloc(12);
  head.write("PACK", 0, "latin1");
  head.writeUInt32BE(2, 4);
  head.writeUInt32BE(uniq.length, 8);
  parts.push(head);
  for (const h of uniq) {
    const tree = snap.trees.get(h);
    const blob = snap.blobs.get(h);
    if (!tree && !blob) throw new InvalidArgument(`object ${h} is not in the snapshot`);
    const [kind, data] = tree ? (["tree", tree.data] as const) : (["blob", blobContent(snap, blob!)] as const);
    parts.push(packHeader(kind, data.length), deflateSync(data));
  }
  const body = Buffer.concat(parts);
  const sum = createHash("sha1").update(body).digest();
  return { pack: Buffer.concat([body, sum]), objects: uniq.length };
}

/** What a push did: the server's answer plus the client's counts. */
export interface PushReport {
  commit: string;
  tree: string;
  branch: string;
  changed: boolean;
  parent?: string;
  objectsWritten: number;
  bytesWritten: number;
  files: number;
  objectsSent: number;
  bytesSent: number;
  roundTrips: number;
}
