package io.topiclake.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * Delta's commit log on s3a, safe across processes and clusters: a commit file
 * (_delta_log/N.json) is created with S3's conditional PUT (If-None-Match: *) through Hadoop
 * 3.5's create option fs.option.create.conditional.overwrite. When another writer got N first,
 * the store answers 412 and the write fails with java.nio.file.FileAlreadyExistsException, which
 * Delta turns into a retry at version N+1: no commit is ever overwritten.
 *
 * Delta's own S3SingleDriverLogStore checks for the file and then writes it, with a lock in one
 * JVM only: two drivers can both see N free and the second write replaces the first.
 *
 * The object appears whole or not at all (a single PUT), so a partial write is never visible.
 */
public class S3ConditionalLogStore extends HadoopFileSystemLogStore {
    static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

    public S3ConditionalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        byte[] content = joinLines(actions);
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (overwrite) {  // only files every writer may replace (_last_checkpoint), never a commit
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(content);
            }
            return;
        }
        FSDataOutputStreamBuilder<FSDataOutputStream, ?> builder = fs.createFile(path);
        builder.overwrite(false).must(CONDITIONAL_CREATE, true);
        try (FSDataOutputStream out = builder.build()) {
            out.write(content);
        } catch (FileAlreadyExistsException | RemoteFileChangedException e) {
            throw alreadyCommitted(path, e);
        } catch (IOException e) {
            if (String.valueOf(e.getMessage()).contains("412")) {  // a precondition failure under another name
                throw alreadyCommitted(path, e);
            }
            throw e;
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }

    private static byte[] joinLines(Iterator<String> actions) {
        StringBuilder text = new StringBuilder();
        while (actions.hasNext()) {
            text.append(actions.next()).append('\n');
        }
        return text.toString().getBytes(StandardCharsets.UTF_8);
    }

    private static java.nio.file.FileAlreadyExistsException alreadyCommitted(Path path, IOException cause) {
        java.nio.file.FileAlreadyExistsException error =
                new java.nio.file.FileAlreadyExistsException(path.toString(), null, "another writer committed it first");
        error.initCause(cause);
        return error;
    }
}
