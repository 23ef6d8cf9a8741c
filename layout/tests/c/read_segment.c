/* A minimal C reader of a hydra-progress segment, written against hydra_progress.h only:
 * maps the file read-only, validates it, probes the writer's liveness with flock, and
 * prints the header identity and every slot (seqlock read) as `name value` lines.
 * Usage: read_segment <path> */
#define _DEFAULT_SOURCE /* flock(2) */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hydra_progress.h"

static const char *liveness(int fd, const volatile hydra_header_v1 *h) {
    if (flock(fd, LOCK_SH | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? "live" : "error";
    flock(fd, LOCK_UN); /* never keep the lock: it would block a new writer's takeover */
    return hydra_lifecycle(h) == HYDRA_LIFECYCLE_CLOSED ? "closed" : "dead";
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <segment>\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        fprintf(stderr, "not a non-empty regular file\n");
        return 1;
    }
    size_t len = (size_t)st.st_size;
    void *base = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    hydra_geometry g;
    int rc = hydra_validate(base, (uint64_t)st.st_size, &g);
    printf("validate %d\n", rc);
    if (rc != HYDRA_OK)
        return 0;

    const volatile hydra_header_v1 *h = (const volatile hydra_header_v1 *)base;
    char text[HYDRA_MODEL_PATH_LEN];
    hydra_copy_string(h->engine_id, HYDRA_ENGINE_ID_LEN, text, sizeof text);
    printf("engine_id %s\n", text);
    hydra_copy_string(h->model_name, HYDRA_MODEL_NAME_LEN, text, sizeof text);
    printf("model_name %s\n", text);
    printf("version_minor %llu\n", (unsigned long long)g.version_minor);
    printf("slot_count %llu\n", (unsigned long long)g.slot_count);
    printf("pid %llu\n", (unsigned long long)hydra_load(&h->pid));
    printf("capabilities %llu\n", (unsigned long long)hydra_load(&h->model_capabilities));
    printf("liveness %s\n", liveness(fd, h));

    /* SIGBUS policy: re-check the size right before reading beyond the header. */
    struct stat now;
    if (fstat(fd, &now) != 0 || now.st_size != st.st_size) {
        printf("size_changed 1\n");
        return 0;
    }
    for (uint64_t i = 0; i < g.slot_count; i++) {
        hydra_slot_v1 copy;
        memset(&copy, 0, sizeof copy);
        rc = hydra_slot_read(hydra_slot_at(base, &g, i), &copy, 64);
        printf("slot%llu.rc %d\n", (unsigned long long)i, rc);
        if (rc == HYDRA_READ_CONTENDED)
            continue;
        printf("slot%llu.seq %llu\n", (unsigned long long)i, (unsigned long long)copy.seq);
#define P(field) \
    printf("slot%llu." #field " %llu\n", (unsigned long long)i, (unsigned long long)copy.field);
        HYDRA_SLOT_GUARDED_WORDS(P)
        P(pending)
#undef P
        uint64_t done, total, at_ns;
        if (rc == HYDRA_OK && hydra_slot_layer(&g, hydra_load(&h->model_capabilities), &copy, &done,
                                              &total, &at_ns))
            printf("slot%llu.layer %llu/%llu at %llu\n", (unsigned long long)i,
                   (unsigned long long)done, (unsigned long long)total,
                   (unsigned long long)at_ns);
        else
            printf("slot%llu.layer none\n", (unsigned long long)i);
        uint64_t step_ns, end_ns, error_ppm;
        if (rc == HYDRA_OK && hydra_slot_prediction(&g, hydra_load(&h->model_capabilities), &copy,
                                                   &step_ns, &end_ns, &error_ppm))
            printf("slot%llu.prediction step %llu end %llu error %llu\n", (unsigned long long)i,
                   (unsigned long long)step_ns, (unsigned long long)end_ns,
                   (unsigned long long)error_ppm);
        else
            printf("slot%llu.prediction none\n", (unsigned long long)i);
    }
    munmap(base, len);
    close(fd);
    return 0;
}
