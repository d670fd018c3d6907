// UnityWebRequestTransport.cs: ParleyClient's HTTP on UnityWebRequest, for every platform Unity builds for,
// WebGL among them (a WebGL player has no threads and no sockets, so no HttpClient). The turn's event stream
// arrives through a DownloadHandlerScript in chunks of any size; ParleyClient's SseLineReader makes lines of
// them (a UTF-8 character or a \r\n split between two chunks comes out whole).
//
// Everything here runs on Unity's main thread and is driven by the player loop (ParleyPlayerLoop's Update):
// nothing blocks, nothing starts a thread or a timer. A task this transport hands out completes in an Update,
// so what awaits it goes on there (or on the context it captured: Unity's main thread). Use it from the main
// thread, in play mode (edit-mode tools: HttpClientTransport, whose requests need no player loop).

#if UNITY_5_3_OR_NEWER
using System;
using System.Collections.Generic;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using UnityEngine;
using UnityEngine.Networking;

namespace Parley
{
    public sealed class UnityWebRequestTransport : IParleyTransport
    {
        readonly List<Exchange> exchanges = new List<Exchange>();
        bool disposed;

        public void Dispose()
        {
            disposed = true;
            foreach (var exchange in exchanges.ToArray()) exchange.Stop();
        }

        public Task<ParleyAnswer> Send(ParleyRequest request)
        {
            var web = Build(request, new DownloadHandlerBuffer());
            if (request.Timeout != Timeout.InfiniteTimeSpan)
                web.timeout = Math.Max(1, (int)Math.Ceiling(request.Timeout.TotalSeconds));
            var whole = new Whole(web);
            Watch(whole);
            web.SendWebRequest();
            return whole.Done.Task;
        }

        public Task<IParleyStream> Open(ParleyRequest request, CancellationToken cancel)
        {
            cancel.ThrowIfCancellationRequested();
            var chunks = new Queue<byte[]>();
            var web = Build(request, new Chunks(chunks));
            var stream = new EventStream(web, chunks, request.Timeout, cancel);
            Watch(stream);
            web.SendWebRequest();
            // on the context that registers it (the main thread): UnityWebRequest may only be touched there
            stream.Registration = cancel.Register(stream.Cancel, true);
            return stream.Opening.Task;
        }

        public Task Delay(TimeSpan delay, CancellationToken cancel)
        {
            cancel.ThrowIfCancellationRequested();
            var wait = new Wait(Now() + (float)delay.TotalSeconds, cancel);
            Watch(wait);
            return wait.Done.Task;
        }

        void Watch(Exchange exchange)
        {
            if (disposed) throw new ObjectDisposedException("UnityWebRequestTransport");
            exchanges.Add(exchange);
            ParleyPlayerLoop.Watch(this);
        }

        /// <summary>Moves every request on (ParleyPlayerLoop calls it once a frame); false when none is left.</summary>
        internal bool Tick()
        {
            float now = Now();
            for (int i = 0; i < exchanges.Count;)
            {
                var exchange = exchanges[i];
                bool finished;
                try
                {
                    finished = exchange.Tick(now);
                }
                catch (Exception e)
                {
                    Debug.LogException(e);
                    finished = true;
                }
                // what a finished exchange's continuation started was added at the end; this one is still at i
                if (finished) exchanges.RemoveAt(exchanges.IndexOf(exchange));
                else i++;
            }
            return exchanges.Count > 0;
        }

        static float Now() { return Time.realtimeSinceStartup; }

        static UnityWebRequest Build(ParleyRequest request, DownloadHandler download)
        {
            var web = new UnityWebRequest(request.Url, request.Method);
            if (request.Body != null)
            {
                web.uploadHandler = new UploadHandlerRaw(Encoding.UTF8.GetBytes(request.Body));
                web.SetRequestHeader("Content-Type", "application/json");
            }
            web.downloadHandler = download;
            foreach (var header in request.Headers) web.SetRequestHeader(header.Key, header.Value);
            return web;
        }

        static bool Answered(UnityWebRequest web)
        {
            return web.result == UnityWebRequest.Result.Success || web.result == UnityWebRequest.Result.ProtocolError;
        }

        // A request that got no answer, told apart by what UnityWebRequest says: on desktop and mobile (libcurl)
        // a refused or unresolved connection says so, a timeout is "Request timeout", anything else broke a
        // connection that was made. A browser says "Unknown Error" either way, so a WebGL player takes a request
        // that received nothing as never connected (as the JS client does in a browser).
        static ParleyTransportException Unanswered(UnityWebRequest web, bool received)
        {
            string error = web.error ?? "";
            if (error.IndexOf("timeout", StringComparison.OrdinalIgnoreCase) >= 0 && !received)
                return new ParleyTransportException(TransportFailure.TimedOut, error);
            bool never = error.StartsWith("Cannot connect to destination host", StringComparison.Ordinal)
                || error.StartsWith("Cannot resolve destination host", StringComparison.Ordinal);
#if UNITY_WEBGL && !UNITY_EDITOR
            never = never || !received;
#endif
            return new ParleyTransportException(never ? TransportFailure.NotConnected : TransportFailure.Broke,
                                                error.Length > 0 ? error : "the request failed (" + web.result + ")");
        }

        abstract class Exchange
        {
            /// <summary>Moves on at time `now`; true when finished (its task has its outcome).</summary>
            public abstract bool Tick(float now);
            /// <summary>The transport is disposed: abort.</summary>
            public abstract void Stop();
        }

        sealed class Wait : Exchange
        {
            public readonly TaskCompletionSource<bool> Done = new TaskCompletionSource<bool>();
            readonly float due;
            readonly CancellationToken cancel;

            public Wait(float due, CancellationToken cancel)
            {
                this.due = due;
                this.cancel = cancel;
            }

            public override bool Tick(float now)
            {
                if (cancel.IsCancellationRequested) Done.TrySetCanceled();
                else if (now >= due) Done.TrySetResult(true);
                return Done.Task.IsCompleted;
            }

            public override void Stop() { Done.TrySetCanceled(); }
        }

        // A request answered whole (DownloadHandlerBuffer).
        sealed class Whole : Exchange
        {
            public readonly TaskCompletionSource<ParleyAnswer> Done = new TaskCompletionSource<ParleyAnswer>();
            readonly UnityWebRequest web;

            public Whole(UnityWebRequest web) { this.web = web; }

            public override bool Tick(float now)
            {
                if (!web.isDone) return false;
                try
                {
                    if (Answered(web)) Done.TrySetResult(new ParleyAnswer((int)web.responseCode, web.downloadHandler.text));
                    else Done.TrySetException(Unanswered(web, web.downloadedBytes > 0));
                }
                finally
                {
                    web.Dispose();
                }
                return true;
            }

            public override void Stop()
            {
                web.Abort();
            }
        }

        // The body's chunks as they arrive (ReceiveData runs on the main thread, once a frame or more); the
        // bytes are copied, since Unity may hand the same buffer again.
        sealed class Chunks : DownloadHandlerScript
        {
            readonly Queue<byte[]> into;

            public Chunks(Queue<byte[]> into) : base(new byte[16 * 1024]) { this.into = into; }

            protected override bool ReceiveData(byte[] data, int dataLength)
            {
                if (data == null || dataLength <= 0) return true;
                var copy = new byte[dataLength];
                Buffer.BlockCopy(data, 0, copy, 0, dataLength);
                into.Enqueue(copy);
                return true;
            }
        }

        // A streamed answer: Opening completes once the status is known (the first bytes, or the end), then
        // Read hands the chunks on. Its tasks complete in Tick, never inside ReceiveData.
        sealed class EventStream : Exchange, IParleyStream
        {
            public readonly TaskCompletionSource<IParleyStream> Opening = new TaskCompletionSource<IParleyStream>();
            public CancellationTokenRegistration Registration;
            readonly UnityWebRequest web;
            readonly Queue<byte[]> chunks;
            readonly float openBy; // until the status arrives (float.MaxValue: no limit)
            readonly CancellationToken cancel;
            int status, offset; // offset: how much of the first chunk was read
            bool opened, ended, disposed, received;
            Exception failure; // how it ended, when not with the whole body
            TaskCompletionSource<int> reading;
            byte[] readInto;
            float readFrom, readBy; // when the read in flight began, and when its silence is too long
            TaskCompletionSource<string> rest;

            public EventStream(UnityWebRequest web, Queue<byte[]> chunks, TimeSpan openTimeout, CancellationToken cancel)
            {
                this.web = web;
                this.chunks = chunks;
                this.cancel = cancel;
                openBy = openTimeout == Timeout.InfiniteTimeSpan ? float.MaxValue : Now() + (float)openTimeout.TotalSeconds;
            }

            public int Status { get { return status; } }

            public string Header(string name) { return web.GetResponseHeader(name); }

            public override bool Tick(float now)
            {
                if (!ended && web.isDone)
                {
                    ended = true;
                    status = (int)web.responseCode;
                    // a status means the server answered, even when no byte of the body came before the break
                    if (!Answered(web) && failure == null)
                        failure = Unanswered(web, received || chunks.Count > 0 || web.responseCode > 0);
                }
                if (chunks.Count > 0) received = true;
                if (!opened)
                {
                    if (cancel.IsCancellationRequested)
                    {
                        Abort(null);
                        Opening.TrySetCanceled();
                        return Finish();
                    }
                    // open once the status is known: the first bytes, the answer's head, or the end
                    if (received || web.responseCode > 0 || (ended && failure == null))
                    {
                        opened = true;
                        status = (int)web.responseCode;
                        Opening.TrySetResult(this);
                    }
                    else if (ended)
                    {
                        Opening.TrySetException(failure);
                        return Finish();
                    }
                    else if (now >= openBy)
                    {
                        Abort(null);
                        Opening.TrySetException(new ParleyTransportException(TransportFailure.TimedOut, "no answer in time"));
                        return Finish();
                    }
                    return false;
                }
                if (reading != null)
                {
                    if (chunks.Count > 0) Complete(Take(readInto), null);
                    else if (ended || disposed) Complete(0, failure);
                    else if (now >= readBy)
                    {
                        var silent = new ParleyTransportException(TransportFailure.TimedOut, "the stream sent nothing for "
                                                                  + Math.Round(readBy - readFrom, 1) + " s");
                        Abort(silent);
                        Complete(0, silent);
                    }
                }
                if (rest != null && (ended || disposed))
                {
                    var text = new StringBuilder();
                    var all = new List<byte>();
                    while (chunks.Count > 0) all.AddRange(chunks.Dequeue());
                    text.Append(Encoding.UTF8.GetString(all.ToArray()));
                    var r = rest;
                    rest = null;
                    r.TrySetResult(text.ToString());
                }
                return disposed && reading == null && rest == null ? Finish() : false;
            }

            public Task<int> Read(byte[] buffer, TimeSpan silence)
            {
                if (reading != null) throw new InvalidOperationException("one read at a time");
                if (chunks.Count > 0) return Task.FromResult(Take(buffer)); // no wait for what has arrived
                if (disposed) return Failed<int>(new ObjectDisposedException("the turn's stream"));
                if (ended) return failure != null ? Failed<int>(failure) : Task.FromResult(0);
                reading = new TaskCompletionSource<int>();
                readInto = buffer;
                readFrom = Now();
                readBy = silence <= TimeSpan.Zero || silence == Timeout.InfiniteTimeSpan
                    ? float.MaxValue : readFrom + (float)silence.TotalSeconds;
                return reading.Task;
            }

            public Task<string> ReadToEnd()
            {
                if (rest == null) rest = new TaskCompletionSource<string>();
                return rest.Task;
            }

            int Take(byte[] buffer)
            {
                var head = chunks.Peek();
                int count = Math.Min(buffer.Length, head.Length - offset);
                Buffer.BlockCopy(head, offset, buffer, 0, count);
                offset += count;
                if (offset == head.Length)
                {
                    chunks.Dequeue();
                    offset = 0;
                }
                return count;
            }

            void Complete(int count, Exception error)
            {
                var r = reading;
                reading = null;
                readInto = null;
                if (error != null) r.TrySetException(error);
                else r.TrySetResult(count);
            }

            static Task<T> Failed<T>(Exception error)
            {
                var failed = new TaskCompletionSource<T>();
                failed.SetException(error);
                return failed.Task;
            }

            void Abort(Exception why)
            {
                if (!ended)
                {
                    ended = true;
                    failure = failure ?? why ?? new ParleyTransportException(TransportFailure.Broke, "the stream was closed");
                    web.Abort();
                }
            }

            bool Finish()
            {
                Registration.Dispose();
                web.Dispose();
                return true;
            }

            // The turn's token was cancelled (on the main thread): a stream still opening stops; an open one
            // is closed by ParleyClient once its cancel is answered.
            public void Cancel()
            {
                if (!opened) Abort(null);
            }

            public void Dispose()
            {
                if (disposed) return;
                disposed = true;
                Abort(new ObjectDisposedException("the turn's stream"));
            }

            public override void Stop() { Dispose(); }
        }
    }
}
#endif
