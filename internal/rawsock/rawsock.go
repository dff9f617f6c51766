package rawsock

// MaxIov is the most slices one writev takes here (TryWritev writes no
// more); Writev writes longer ones in several.
const MaxIov = 128
