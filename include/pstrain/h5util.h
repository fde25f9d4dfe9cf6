/*
 * pstrain/h5util.h - small helpers every HDF5 user in pstrain shares.
 *
 * pstrain turns HDF5's automatic error-stack printing off and reports its
 * own one-line messages; h5u_reason() gives the most specific reason HDF5
 * recorded, to append to such a message.
 */
#ifndef PSTRAIN_H5UTIL_H
#define PSTRAIN_H5UTIL_H

/* The innermost (most specific) description on HDF5's error stack, written
 * into buf (256 bytes); the stack is then cleared. Returns buf. */
const char *h5u_reason(char buf[256]);

#endif
