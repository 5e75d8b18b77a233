package repositories

import (
	"github.com/lockstep-hq/lockstep/gitobj"
)

// ObjectStore is the object storage of one fork network: the seam
// between the services and where objects live (gitobj.Store: a Reader,
// a Writer, a RefMirror and a GitDir). The services reach a repository's
// objects only through it (Service.Network), and know neither its
// implementations (gitstore.Network, a local bare repository;
// replica.Network, packs in a bucket) nor go-git: Config.Objects opens
// them. See gitobj for the contract, gitobj/gitobjtest for the suite
// every implementation passes.
type ObjectStore = gitobj.Store

// Refresher is an ObjectStore whose objects are shared by several
// replicas (replica.Network): Refresh brings its cache up to date with
// what the others wrote, and git's ref mirror of a repository is synced
// from the store before git serves it.
type Refresher = gitobj.Refresher
