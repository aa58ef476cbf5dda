// A minimal JSON reader for guests: finds members in an object and decodes strings, with no
// allocation but the decoded strings. Enough to read a Kubernetes object's fields; a guest that
// needs more can vendor a full parser (the component has no access to anything but memory, so
// any portable C JSON library works).
//
// Every function takes the text as [p, end) and returns NULL when the text is not valid JSON
// where it looked.
#ifndef RECONCILER_JSON_H
#define RECONCILER_JSON_H

#include <stddef.h>

// Skips whitespace.
const char *json_ws(const char *p, const char *end);

// Returns the end of the value that starts at p (after whitespace), or NULL.
const char *json_skip(const char *p, const char *end);

// Within the object at p, returns the start of the value of member `key`, or NULL when p is not
// an object or has no such member.
const char *json_member(const char *p, const char *end, const char *key);

// The Python name of the JSON type of the value at p ("str", "int", "float", "bool", "list",
// "dict", "NoneType"): every language's greeter words its errors the same way.
const char *json_type_name(const char *p, const char *end);

// Decodes the string value at p into a malloc'd UTF-8 buffer (NUL-terminated; *len without the
// NUL), or NULL when p is not a valid string.
char *json_string(const char *p, const char *end, size_t *len);

#endif
