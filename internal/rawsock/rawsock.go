package rawsock

// MaxIov is the most slices one writev takes here (WritevOnce writes no
// more); Writev writes longer ones in several.
const MaxIov = 128
