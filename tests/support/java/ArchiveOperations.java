import io.aeron.ChannelUri;
import io.aeron.ExclusivePublication;
import io.aeron.Subscription;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.client.ArchiveException;
import io.aeron.archive.codecs.SourceLocation;
import io.aeron.archive.status.RecordingPos;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.CountersReader;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Every operation of Aeron 1.15.1's AeronArchive client against an archive, printing "key=value" lines for the test to
 * check: record (a recorded exclusive publication), positions, listings, find-last-matching, replay, stop replay,
 * extend, truncate, and the errors of unknown recordings.
 *
 * Arguments: aeron dir, control channel, control stream id, response channel, response stream id, channel, stream id.
 * Every wait is bounded (10 s); a wait that runs out exits with status 2.
 */
public class ArchiveOperations
{
    private static final long WAIT_NS = 10_000_000_000L;

    public static void main(final String[] args) throws Exception
    {
        final String channel = args[5];
        final int streamId = Integer.parseInt(args[6]);
        final AeronArchive.Context ctx = new AeronArchive.Context()
            .aeronDirectoryName(args[0])
            .controlRequestChannel(args[1])
            .controlRequestStreamId(Integer.parseInt(args[2]))
            .controlResponseChannel(args[3])
            .controlResponseStreamId(Integer.parseInt(args[4]));

        try (AeronArchive archive = AeronArchive.connect(ctx))
        {
            System.out.println("controlSessionId=" + archive.controlSessionId());
            final CountersReader counters = archive.context().aeron().countersReader();
            final UnsafeBuffer buffer = new UnsafeBuffer(new byte[256]);

            final ExclusivePublication publication = archive.addRecordedExclusivePublication(channel, streamId);
            int counterId = RecordingPos.findCounterIdBySession(counters, publication.sessionId());
            final long deadline = System.nanoTime() + WAIT_NS;
            while (CountersReader.NULL_COUNTER_ID == counterId)
            {
                check(deadline, "rec-pos counter");
                Thread.yield();
                counterId = RecordingPos.findCounterIdBySession(counters, publication.sessionId());
            }
            final long recordingId = RecordingPos.getRecordingId(counters, counterId);
            System.out.println("recordingId=" + recordingId);
            System.out.println("sessionId=" + publication.sessionId());

            for (int i = 0; i < 10; i++)
            {
                final byte[] bytes = ("message " + i).getBytes(StandardCharsets.US_ASCII);
                buffer.putBytes(0, bytes);
                while (publication.offer(buffer, 0, bytes.length) < 0)
                {
                    check(deadline, "offer");
                    Thread.yield();
                }
            }
            final long end = publication.position();
            while (counters.getCounterValue(counterId) < end)
            {
                check(deadline, "recorded");
                Thread.yield();
            }
            System.out.println("end=" + end);
            System.out.println("recordingPosition=" + archive.getRecordingPosition(recordingId));
            System.out.println("stopPositionWhileActive=" + archive.getStopPosition(recordingId));
            archive.stopRecording(publication);
            publication.close();
            long stop = archive.getStopPosition(recordingId);
            while (stop != end)
            {
                check(deadline, "stopped");
                Thread.yield();
                stop = archive.getStopPosition(recordingId);
            }
            System.out.println("stopPosition=" + stop);
            System.out.println("recordingPositionStopped=" + archive.getRecordingPosition(recordingId));

            final List<String> listed = new ArrayList<>();
            final int count = archive.listRecordings(
                0, 10,
                (controlSessionId, correlationId, id, startTimestamp, stopTimestamp, startPosition, stopPosition,
                initialTermId, segmentFileLength, termBufferLength, mtuLength, sessionId, stream, strippedChannel,
                originalChannel, sourceIdentity) -> listed.add(
                    id + " " + startPosition + " " + stopPosition + " " + stream + " " + sessionId + " " +
                    termBufferLength + " " + originalChannel));
            System.out.println("listRecordings=" + count);
            for (final String line : listed)
            {
                System.out.println("listed=" + line);
            }
            System.out.println("listRecordingsForUri=" + archive.listRecordingsForUri(
                0, 10, "ipc", streamId, (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p) -> {}));
            System.out.println("listRecordingsForUriOtherStream=" + archive.listRecordingsForUri(
                0, 10, "ipc", streamId + 1, (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p) -> {}));
            System.out.println("listRecording=" + archive.listRecording(
                recordingId, (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p) -> {}));
            System.out.println("listRecordingUnknown=" + archive.listRecording(
                recordingId + 100, (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p) -> {}));
            System.out.println("findLastMatchingRecording=" + archive.findLastMatchingRecording(
                0, "ipc", streamId, publication.sessionId()));
            System.out.println("findLastMatchingRecordingNone=" + archive.findLastMatchingRecording(
                0, "ipc", streamId, publication.sessionId() + 1));

            final List<String> replayed = new ArrayList<>();
            final FragmentHandler handler =
                (buf, offset, length, header) -> replayed.add(buf.getStringWithoutLengthAscii(offset, length));
            try (Subscription replay = archive.replay(recordingId, 0, AeronArchive.NULL_LENGTH, "aeron:ipc", 4001))
            {
                while (replayed.size() < 10)
                {
                    check(deadline + WAIT_NS, "replay");
                    if (replay.poll(handler, 10) == 0)
                    {
                        Thread.yield();
                    }
                }
            }
            System.out.println("replayed=" + String.join(",", replayed));

            final long replaySessionId = archive.startReplay(recordingId, 0, AeronArchive.NULL_LENGTH, "aeron:ipc", 4002);
            System.out.println("replaySessionId=" + replaySessionId);
            archive.stopReplay(replaySessionId);
            System.out.println("stopReplay=ok");

            final ChannelUri extendUri = ChannelUri.parse(channel);
            extendUri.initialPosition(end, publication.initialTermId(), publication.termBufferLength());
            final String extendChannel = extendUri.toString();
            archive.extendRecording(recordingId, channel, streamId, SourceLocation.LOCAL);
            try (ExclusivePublication more = archive.context().aeron().addExclusivePublication(extendChannel, streamId))
            {
                int extendCounter = RecordingPos.findCounterIdBySession(counters, more.sessionId());
                while (CountersReader.NULL_COUNTER_ID == extendCounter)
                {
                    check(deadline + 2 * WAIT_NS, "extension counter");
                    Thread.yield();
                    extendCounter = RecordingPos.findCounterIdBySession(counters, more.sessionId());
                }
                final byte[] bytes = "extended".getBytes(StandardCharsets.US_ASCII);
                buffer.putBytes(0, bytes);
                while (more.offer(buffer, 0, bytes.length) < 0)
                {
                    check(deadline + 2 * WAIT_NS, "offer extension");
                    Thread.yield();
                }
                while (counters.getCounterValue(extendCounter) < more.position())
                {
                    check(deadline + 2 * WAIT_NS, "extension recorded");
                    Thread.yield();
                }
                System.out.println("extendedEnd=" + more.position());
                archive.stopRecording(channel, streamId);
            }
            long extendedStop = archive.getStopPosition(recordingId);
            while (extendedStop == AeronArchive.NULL_POSITION)
            {
                check(deadline + 3 * WAIT_NS, "extension stopped");
                Thread.yield();
                extendedStop = archive.getStopPosition(recordingId);
            }
            System.out.println("extendedStop=" + extendedStop);

            archive.truncateRecording(recordingId, 64);
            System.out.println("truncatedStop=" + archive.getStopPosition(recordingId));

            try
            {
                archive.getStopPosition(recordingId + 100);
                System.out.println("unknownStopPosition=no error");
            }
            catch (final ArchiveException ex)
            {
                System.out.println("unknownStopPosition=" + ex.errorCode());
            }
            try
            {
                archive.stopReplay(replaySessionId + (1L << 40));
                System.out.println("unknownReplay=no error");
            }
            catch (final ArchiveException ex)
            {
                System.out.println("unknownReplay=" + ex.errorCode());
            }
        }
    }

    private static void check(final long deadline, final String what)
    {
        if (System.nanoTime() > deadline)
        {
            System.out.println("timeout=" + what);
            System.exit(2);
        }
    }
}
