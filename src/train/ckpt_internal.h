/*
 * ckpt_internal.h - what the checkpoint files (ckpt.c) and their attributes
 * (ckpt_meta.c) share; private to src/train.
 */
#ifndef PSTRAIN_CKPT_INTERNAL_H
#define PSTRAIN_CKPT_INTERNAL_H

#include <hdf5.h>

#include "pstrain/ckpt.h"

/* Closes an HDF5 id of any kind if it is valid. */
static inline void h5_close(hid_t id)
{
    if (id < 0) return;
    switch (H5Iget_type(id)) {
    case H5I_FILE:
        H5Fclose(id);
        break;
    case H5I_GROUP:
        H5Gclose(id);
        break;
    case H5I_DATASET:
        H5Dclose(id);
        break;
    case H5I_DATASPACE:
        H5Sclose(id);
        break;
    case H5I_DATATYPE:
        H5Tclose(id);
        break;
    case H5I_ATTR:
        H5Aclose(id);
        break;
    case H5I_GENPROP_LST:
        H5Pclose(id);
        break;
    default:
        break;
    }
}

/* The optimizer names of the "optimizer" attribute, by opt_kind. */
static const char *const g_opt_names[] = {
    [OPT_SGD] = "sgd", [OPT_MOMENTUM] = "momentum", [OPT_RMSPROP] = "rmsprop", [OPT_ADAM] = "adam"};

/* ckpt_meta.c: the run's attributes on the root group of an open file. */
int ckpt_meta_write(hid_t f, const ckpt_meta *m);
/* Reads and checks them (each against its valid range): 0, or -1 with a
 * message naming the file `path` and the attribute. */
int ckpt_meta_read(hid_t f, const char *path, ckpt_meta *m, pst_err *e);
/* The ranges of the attributes of a run about to be written. */
int ckpt_meta_check_limits(const char *path, const ckpt_meta *m, pst_err *e);
/* A string attribute (caller frees), or NULL; a numeric one of `count`
 * elements of type `mtype`: 0, or -1. */
char *ckpt_attr_read_str(hid_t loc, const char *name);
int ckpt_attr_read_num(hid_t loc, const char *name, hid_t mtype, void *buf, hssize_t count);

#endif
