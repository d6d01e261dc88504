package events

// lru is a fixed-size least-recently-used map. It is not safe for
// concurrent use: the correlator's mutex guards it.
// Evicted nodes are recycled, so a full cache allocates nothing.
type lru[K comparable, V any] struct {
	max   int
	items map[K]*lruNode[K, V]
	root  lruNode[K, V] // sentinel: root.next is the most recent entry
}

type lruNode[K comparable, V any] struct {
	key        K
	val        V
	prev, next *lruNode[K, V]
}

func newLRU[K comparable, V any](size int) *lru[K, V] {
	c := &lru[K, V]{max: size, items: make(map[K]*lruNode[K, V], size)}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// get returns a pointer to the value for k, marking it most recent, or
// nil. The pointer stays valid until the entry is evicted.
func (c *lru[K, V]) get(k K) *V {
	n, ok := c.items[k]
	if !ok {
		return nil
	}
	c.moveToFront(n)
	return &n.val
}

// put stores v under k as the most recent entry, evicting the least
// recent one when the cache is full, and returns a pointer to the stored
// value.
func (c *lru[K, V]) put(k K, v V) *V {
	if n, ok := c.items[k]; ok {
		n.val = v
		c.moveToFront(n)
		return &n.val
	}
	var n *lruNode[K, V]
	if len(c.items) >= c.max {
		n = c.root.prev // least recent
		c.unlink(n)
		delete(c.items, n.key)
	} else {
		n = &lruNode[K, V]{}
	}
	n.key, n.val = k, v
	c.items[k] = n
	c.pushFront(n)
	return &n.val
}

func (c *lru[K, V]) unlink(n *lruNode[K, V]) {
	n.prev.next = n.next
	n.next.prev = n.prev
}

func (c *lru[K, V]) pushFront(n *lruNode[K, V]) {
	n.prev = &c.root
	n.next = c.root.next
	c.root.next.prev = n
	c.root.next = n
}

func (c *lru[K, V]) moveToFront(n *lruNode[K, V]) {
	if c.root.next == n {
		return
	}
	c.unlink(n)
	c.pushFront(n)
}
