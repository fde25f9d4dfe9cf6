/*
 * pstrain/h5util.h - small helpers every HDF5 user in pstrain shares.
 *
 * pstrain turns HDF5's automatic error-stack printing off and reports its
 * own one-line messages; h5u_reason() gives the most specific reason HDF5
 * recorded, to append to such a message.
 */
#ifndef PSTRAIN_H5UTIL_H
#define PSTRAIN_H5UTIL_H

#include <stdbool.h>

/* The innermost (most specific) description on HDF5's error stack, written
 * into buf (256 bytes); the stack is then cleared. Returns buf. */
const char *h5u_reason(char buf[256]);

/* Debian's HDF5 is built without thread safety: two threads must never be
 * inside the library at once. Every module that calls HDF5 from a thread that
 * may run concurrently with another HDF5 user (the pipeline's reader thread,
 * the main thread writing a checkpoint or evaluating) holds this one lock
 * around its HDF5 calls. The lock is recursive, so a locked helper may call
 * another locked helper. */
void h5u_lock(void);
void h5u_unlock(void);
/* Whether the calling thread holds the lock (tests check that every HDF5
 * call of the trainer is made under it). */
bool h5u_held(void);

#endif
