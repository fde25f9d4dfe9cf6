/*
 * mn_hello.c - the multinode harness's smoke program: every rank reports
 * its processor name (the emulated host's UTS host name) to rank 0, which
 * prints one line per rank, "rank R on host H", in rank order. Between
 * the lines and the exit it checks what pstrain needs from the transport:
 * an allreduce and, on a window from MPI_Win_allocate under lock_all,
 * MPI_Fetch_and_op, MPI_Put and MPI_Get across hosts.
 *
 *   mn_hello [EXPECT_HOSTS]
 *
 * With EXPECT_HOSTS, rank 0 also checks that the ranks ran on exactly that
 * many distinct hosts. Exit 0, or 1 with a message on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1, len = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    MPI_Get_processor_name(name, &len);
    char *all = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);

    /* every rank adds rank+1 to a counter on rank 0 and puts its rank into
     * its slot on its right neighbour; the sum and the slots are checked */
    long *base = NULL;
    MPI_Win win;
    MPI_Win_allocate(2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    base[0] = 0;
    base[1] = -1;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    long one = rank + 1, old = 0, mine = rank;
    MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 0, MPI_SUM, win);
    MPI_Put(&mine, 1, MPI_LONG, (rank + 1) % size, 1, 1, MPI_LONG, win);
    MPI_Win_flush_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    long got[2] = {0, 0};
    MPI_Get(got, 2, MPI_LONG, 0, 0, 2, MPI_LONG, win);
    MPI_Win_flush(0, win);
    MPI_Win_sync(win); /* the neighbour's put, seen in this rank's own memory */
    MPI_Win_unlock_all(win);
    int ok = got[0] == (long)size * (size + 1) / 2 && base[1] == (rank + size - 1) % size;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);

    int rc = 0;
    if (rank == 0) {
        int hosts = 0;
        for (int r = 0; r < size; r++) {
            const char *h = all + (size_t)r * MPI_MAX_PROCESSOR_NAME;
            printf("rank %d on host %s\n", r, h);
            int seen = 0;
            for (int q = 0; q < r && !seen; q++)
                seen = !strcmp(h, all + (size_t)q * MPI_MAX_PROCESSOR_NAME);
            hosts += !seen;
        }
        printf("%d ranks on %d hosts, one-sided %s\n", size, hosts, all_ok ? "ok" : "WRONG");
        if (!all_ok) rc = 1;
        if (argc > 1 && hosts != atoi(argv[1])) {
            fprintf(stderr, "mn_hello: %d hosts, expected %s\n", hosts, argv[1]);
            rc = 1;
        }
        fflush(stdout);
    }
    MPI_Win_free(&win);
    free(all);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
