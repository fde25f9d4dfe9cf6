# Sourced by the ops tests that train on a small Fashion-MNIST data set
# (test_resume.sh, test_stop_drained.sh).
#
# small_fm_h5 FM DIR: writes DIR/d.h5 from the first 2048 train and 512 test
# images of the Fashion-MNIST idx files in FM (cut from the .gz files: a header
# with the new count, then the first images), through pstrain-prep idx.
# Returns non-zero with a message when pstrain-prep fails.

cut_idx() { # src.gz dst count item_bytes header_bytes
    local src=$1 dst=$2 n=$3 item=$4 hdr=$5
    {
        gzip -dc "$src" | head -c 4
        printf "%08x" "$n" | sed 's/../\\x&/g' | xargs -0 printf
        gzip -dc "$src" | head -c "$hdr" | tail -c +9
        gzip -dc "$src" | tail -c +$((hdr + 1)) | head -c $((n * item))
    } >"$dst"
}

small_fm_h5() { # fm dir
    local fm=$1 dir=$2
    cut_idx "$fm/train-images-idx3-ubyte.gz" "$dir/tr-img" 2048 784 16
    cut_idx "$fm/train-labels-idx1-ubyte.gz" "$dir/tr-lab" 2048 1 8
    cut_idx "$fm/t10k-images-idx3-ubyte.gz" "$dir/te-img" 512 784 16
    cut_idx "$fm/t10k-labels-idx1-ubyte.gz" "$dir/te-lab" 512 1 8
    "${PSTRAIN_PREP:?}" idx --train-images "$dir/tr-img" --train-labels "$dir/tr-lab" \
        --test-images "$dir/te-img" --test-labels "$dir/te-lab" -o "$dir/d.h5" >/dev/null || {
        echo "FAIL: pstrain-prep idx of the cut files" >&2
        return 1
    }
}
