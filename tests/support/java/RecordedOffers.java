import io.aeron.ExclusivePublication;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.status.RecordingPos;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.CountersReader;

/**
 * Records an exclusive publication on an archive through Aeron 1.15.1's AeronArchive client and offers as fast as it
 * can: what an Aeron deployment's recorded service does, to fill an archive directory Java wrote. Each payload's first
 * 8 bytes are the message's index (little-endian), the rest 0xAB. Once the rec-pos counter reaches the publication's
 * position it stops the recording and prints "key=value" lines: recordingId, messages, position, seconds (first offer
 * to recorded).
 *
 * Arguments: aeron dir, control channel, control stream id, response channel, response stream id, channel, stream id,
 * messages, payload length. Every wait is bounded (300 s); a wait that runs out exits with status 2.
 */
public class RecordedOffers
{
    private static final long WAIT_NS = 300_000_000_000L;

    public static void main(final String[] args) throws Exception
    {
        final String channel = args[5];
        final int streamId = Integer.parseInt(args[6]);
        final long messages = Long.parseLong(args[7]);
        final int length = Integer.parseInt(args[8]);
        final AeronArchive.Context ctx = new AeronArchive.Context()
            .aeronDirectoryName(args[0])
            .controlRequestChannel(args[1])
            .controlRequestStreamId(Integer.parseInt(args[2]))
            .controlResponseChannel(args[3])
            .controlResponseStreamId(Integer.parseInt(args[4]));

        try (AeronArchive archive = AeronArchive.connect(ctx))
        {
            final CountersReader counters = archive.context().aeron().countersReader();
            final UnsafeBuffer buffer = new UnsafeBuffer(new byte[Math.max(length, 8)]);
            buffer.setMemory(0, buffer.capacity(), (byte)0xAB);

            final ExclusivePublication publication = archive.addRecordedExclusivePublication(channel, streamId);
            final long deadline = System.nanoTime() + WAIT_NS;
            int counterId = RecordingPos.findCounterIdBySession(counters, publication.sessionId());
            while (CountersReader.NULL_COUNTER_ID == counterId)
            {
                check(deadline, "rec-pos counter");
                Thread.yield();
                counterId = RecordingPos.findCounterIdBySession(counters, publication.sessionId());
            }
            final long recordingId = RecordingPos.getRecordingId(counters, counterId);

            final long started = System.nanoTime();
            for (long i = 0; i < messages; i++)
            {
                buffer.putLong(0, i, java.nio.ByteOrder.LITTLE_ENDIAN);
                while (publication.offer(buffer, 0, length) < 0)
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
            final long recorded = System.nanoTime();
            archive.stopRecording(publication);
            publication.close();
            while (archive.getStopPosition(recordingId) != end)
            {
                check(deadline, "stopped");
                Thread.sleep(1);
            }
            System.out.println("recordingId=" + recordingId);
            System.out.println("messages=" + messages);
            System.out.println("position=" + end);
            System.out.println("seconds=" + ((recorded - started) / 1e9));
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
