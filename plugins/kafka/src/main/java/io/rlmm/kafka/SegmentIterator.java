package io.rlmm.kafka;

import io.grpc.StatusRuntimeException;
import io.rlmm.v1.ListRemoteLogSegmentsResponse;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

import java.util.Collections;
import java.util.HashSet;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Set;

/**
 * The segments of a ListRemoteLogSegments stream, pulled a chunk at a time as they are iterated. Each stream
 * ends by its attempt's deadline, which also ends a listing that is never iterated to the end (a broker's
 * timestamp search stops at the first match). A listing iterated for longer (a retention pass deletes segment
 * after segment) goes on in a new stream that skips the segments already returned: weakly consistent, as the
 * iterators of Kafka's own store over its concurrent maps.
 */
final class SegmentIterator implements Iterator<RemoteLogSegmentMetadata> {
    /** Opens the listing's stream again (with failover and retries), or fails as a call fails. */
    @FunctionalInterface
    interface Opener {
        Iterator<ListRemoteLogSegmentsResponse> open() throws RemoteStorageException;
    }

    private final Opener opener;
    private final Set<String> returned = new HashSet<>();
    private Iterator<ListRemoteLogSegmentsResponse> chunks;
    private Iterator<io.rlmm.v1.RemoteLogSegmentMetadata> chunk = Collections.emptyIterator();
    private io.rlmm.v1.RemoteLogSegmentMetadata upcoming;
    private boolean movedOn = true;  // the current stream gave a segment not returned before (or is the first)

    private SegmentIterator(Opener opener) {
        this.opener = opener;
    }

    /** Opens the listing; the opener reads the first chunk, so that a failure (NOT_FOUND...) is thrown here. */
    static SegmentIterator open(Opener opener) throws RemoteStorageException {
        SegmentIterator segments = new SegmentIterator(opener);
        segments.chunks = opener.open();
        segments.advance();
        return segments;
    }

    @Override
    public boolean hasNext() {
        if (upcoming == null) {
            try {
                advance();
            } catch (RemoteStorageException e) {
                throw new KafkaException("listRemoteLogSegments broke off and could not go on: " + e.getMessage(), e);
            }
        }
        return upcoming != null;
    }

    @Override
    public RemoteLogSegmentMetadata next() {
        if (!hasNext()) {
            throw new NoSuchElementException();
        }
        io.rlmm.v1.RemoteLogSegmentMetadata segment = upcoming;
        upcoming = null;
        returned.add(segment.getRemoteLogSegmentId().getId());
        return Convert.fromProto(segment);
    }

    /** Finds the next segment not returned yet, in this stream or, when it broke off, in a new one. */
    private void advance() throws RemoteStorageException {
        while (upcoming == null) {
            try {
                while (!chunk.hasNext()) {
                    if (!chunks.hasNext()) {
                        return;
                    }
                    chunk = chunks.next().getRemoteLogSegmentMetadataList().iterator();
                }
            } catch (StatusRuntimeException e) {
                if (!movedOn) {  // a new stream that broke off before a new segment: the listing fails
                    throw new RemoteStorageException("listRemoteLogSegments: " + e.getStatus(), e);
                }
                chunks = opener.open();
                chunk = Collections.emptyIterator();
                movedOn = false;
                continue;
            }
            io.rlmm.v1.RemoteLogSegmentMetadata segment = chunk.next();
            if (!returned.contains(segment.getRemoteLogSegmentId().getId())) {
                upcoming = segment;
                movedOn = true;
            }
        }
    }
}
