/* hf_index.c: a sharded Hugging Face model's model.safetensors.index.json (io_int.h,
 * sn_hf_index_walk), for the GPT-2 and LLaMA-family readers: each tensor's shard checked to be a
 * plain file name of the model's directory that is there, then handed to the reader. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "io_int.h"

sn_status sn_hf_index_walk(const char *dir, const char *index, sn_hf_shard_fn fn, void *ctx, sn_err *e) {
#ifndef SN_HAVE_JSONC
    (void)dir, (void)fn, (void)ctx;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it reads no "
                   "sharded models: install libjson-c-dev and rebuild (./setup)", index);
#else
    json_object *root, *map;
    sn_status s = sn_hf_read_json(index, &root, e);
    if (s) return s;
    if (!json_object_object_get_ex(root, "weight_map", &map) || !json_object_is_type(map, json_type_object)) {
        json_object_put(root);
        return sn_fail(e, SN_ERR_PARSE, "%s has no \"weight_map\" object of tensor -> shard file: "
                       "download it again", index);
    }
    char path[4400];
    json_object_object_foreach(map, name, file) {
        const char *shard = json_object_is_type(file, json_type_string) ? json_object_get_string(file) : "";
        if (!shard[0] || shard[0] == '.' || strchr(shard, '/') || strlen(shard) > 255) {
            s = sn_fail(e, SN_ERR_PARSE, "%s: tensor %s's shard \"%.80s\" is not a file name in the "
                        "model's directory: download the index again", index, name, shard);
            break;
        }
        bool first = true; /* no earlier tensor named this shard */
        json_object_object_foreach(map, before, bfile) {
            if (!strcmp(before, name)) break;
            first = first && !(json_object_is_type(bfile, json_type_string) &&
                               !strcmp(json_object_get_string(bfile), shard));
        }
        snprintf(path, sizeof path, "%s/%s", dir, shard);
        if (access(path, F_OK) != 0) {
            s = sn_fail(e, SN_ERR_IO, "%s names shard %s (for tensor %s), which is not in %s: "
                        "download every shard of the model", index, shard, name, dir);
            break;
        }
        if ((s = fn(ctx, path, name, first, e))) break;
    }
    json_object_put(root);
    return s;
#endif
}
