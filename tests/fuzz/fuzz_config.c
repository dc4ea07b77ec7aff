/*
 * tests/fuzz/fuzz_config.c - libFuzzer target for VRAMTRACE_CONF parsing:
 * any text must parse without a crash, leave every key in its documented
 * range, and format back to text that parses with no problem reported.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    FILE *sink = fopen("/dev/null", "w");
    vt__conf c;
    vt__config_defaults(&c);
    vt__config_parse(text, &c, sink);
    if (c.stack_depth > 256 || c.max_events < 1024 || c.per_process_memory_fraction <= 0 ||
        c.per_process_memory_fraction > 1 || c.garbage_collection_threshold < 0 ||
        c.garbage_collection_threshold >= 1)
        abort();
    char back[1024];
    vt__config_format(&c, back, sizeof back);
    vt__conf again;
    vt__config_defaults(&again);
    if (vt__config_parse(back, &again, sink) != 0)
        abort();   /* what we print must read back */
    fclose(sink);
    free(text);
    return 0;
}
