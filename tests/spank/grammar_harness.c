/*
 * grammar_harness.c - spank/gavel_grammar.h alone, for tests (no Slurm needed).
 *
 * Usage: grammar_harness [MAX_WEIGHT|none] < records
 * Each record on stdin ends with a NUL byte (a comment cannot hold one); for each
 * it prints one line: "plain", "managed" or "refuse<TAB>why" (why with \xNN escapes).
 */
#include <stdio.h>
#include <stdlib.h>

#include "gavel_grammar.h"

int main(int argc, char **argv)
{
	long long cap = GAVEL_DEFAULT_MAX_WEIGHT_MICRO;
	size_t size = 0, used = 0, start = 0, i;
	char *buf = NULL, why[512], *p;
	int c;

	if (argc > 1 && strcmp(argv[1], "none") == 0)
		cap = -1;
	else if (argc > 1 && !gavel_parse_decimal(argv[1], strlen(argv[1]), &cap))
		return 2;
	while ((c = getchar()) != EOF) {
		if (used + 2 > size) {
			size = size ? 2 * size : 1 << 16;
			buf = realloc(buf, size);
			if (!buf)
				return 3;
		}
		buf[used++] = (char)c;
	}
	if (!buf)
		return 0;
	buf[used] = '\0';
	for (i = 0; i <= used; i++) {
		if (i < used && buf[i] != '\0')
			continue;
		if (i == used && start == used)
			break; /* no record after the last separator */
		switch (gavel_check_comment(buf + start, cap, why, sizeof(why))) {
		case GAVEL_PLAIN:
			puts("plain");
			break;
		case GAVEL_MANAGED:
			puts("managed");
			break;
		default:
			fputs("refuse\t", stdout);
			for (p = why; *p; p++) /* one line per record, whatever the why quotes */
				if (*p >= 0x20 && *p < 0x7f)
					putchar(*p);
				else
					printf("\\x%02x", (unsigned char)*p);
			putchar('\n');
		}
		start = i + 1;
	}
	free(buf);
	return 0;
}
