// Stand-ins for the few UnityEngine types the package's Runtime and sample use, so they build with Mono's
// mcs and run outside Unity (tests/clients/test_unity_package.py). NOT Unity: a small imitation of what the
// package relies on, written from Unity's documentation.
//
// - Player.Run is the main thread: a one-thread SynchronizationContext (as Unity's), and a frame loop that
//   calls Start once and then Update on every MonoBehaviour, and moves each UnityWebRequest on.
// - UnityWebRequest really does HTTP (on HttpClient, on a worker thread, as Unity's engine does it natively)
//   but everything the script sees happens on the main thread, in a frame: responseCode, isDone, result,
//   error, and DownloadHandlerScript.ReceiveData, which gets the body in small pieces (ChunkBytes: 7 by
//   default, so UTF-8 characters and \r\n fall across pieces). Touching it off the main thread throws.
// - The errors are the strings Unity's UnityWebRequest gives: "Cannot connect to destination host",
//   "Request timeout", "Request aborted"; any other failure of a connection that was made says "Curl error 56".

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Net.Http;
using System.Net.Sockets;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;

namespace UnityEngine
{
    public class Object
    {
        public string name = "";
        public HideFlags hideFlags;

        public static void DontDestroyOnLoad(Object target) { }

        public static void Destroy(Object target)
        {
            var behaviour = target as MonoBehaviour;
            if (behaviour != null) Player.Remove(behaviour);
        }
    }

    [Flags]
    public enum HideFlags { None = 0, HideAndDontSave = 61 }

    public class Component : Object
    {
        public GameObject gameObject;
        public T GetComponent<T>() where T : Component { return gameObject.GetComponent<T>(); }
    }

    public class Behaviour : Component
    {
        public bool enabled = true;
    }

    public class MonoBehaviour : Behaviour
    {
        internal bool started;
    }

    public sealed class GameObject : Object
    {
        readonly List<Component> components = new List<Component>();

        public GameObject(string name) { this.name = name; }

        public T AddComponent<T>() where T : Component, new()
        {
            var component = new T { gameObject = this, name = name };
            components.Add(component);
            var behaviour = component as MonoBehaviour;
            if (behaviour != null)
            {
                Player.Call(behaviour, "Awake"); // Awake at once, Start before its first Update: as Unity does
                Player.Add(behaviour);
            }
            return component;
        }

        public T GetComponent<T>() where T : Component { return components.OfType<T>().FirstOrDefault(); }
    }

    public static class Time
    {
        public static float realtimeSinceStartup { get { return (float)Player.Clock.Elapsed.TotalSeconds; } }
    }

    public static class Application
    {
        public static bool isPlaying { get { return true; } }
    }

    public static class Debug
    {
        public static void Log(object message) { Console.WriteLine(message); }
        public static void LogWarning(object message) { Console.WriteLine("warning: " + message); }
        public static void LogError(object message) { Console.WriteLine("error: " + message); }
        public static void LogException(Exception e) { Console.WriteLine("exception: " + e); }
    }

    public static class PlayerPrefs
    {
        static readonly Dictionary<string, string> strings = new Dictionary<string, string>();
        public static void SetString(string key, string value) { strings[key] = value; }
        public static string GetString(string key, string fallback = "")
        {
            string value;
            return strings.TryGetValue(key, out value) ? value : fallback;
        }
        public static bool HasKey(string key) { return strings.ContainsKey(key); }
        public static void Save() { }
    }

    public static class GUILayout
    {
        public static void Label(string text) { }
        public static string TextField(string text) { return text; }
        public static bool Button(string text) { return false; }
        public static void BeginHorizontal() { }
        public static void EndHorizontal() { }
    }

    [AttributeUsage(AttributeTargets.Field)] public sealed class SerializeField : Attribute { }
    [AttributeUsage(AttributeTargets.Field)] public sealed class TooltipAttribute : Attribute { public TooltipAttribute(string text) { } }
    [AttributeUsage(AttributeTargets.Field)] public sealed class HeaderAttribute : Attribute { public HeaderAttribute(string text) { } }
    [AttributeUsage(AttributeTargets.Field)] public sealed class TextAreaAttribute : Attribute { }
    [AttributeUsage(AttributeTargets.Class)] public sealed class AddComponentMenu : Attribute { public AddComponentMenu(string path) { } }
    [AttributeUsage(AttributeTargets.Class)] public sealed class DisallowMultipleComponent : Attribute { }

    /// <summary>The stand-in's main thread and frame loop (not a Unity type).</summary>
    public static class Player
    {
        internal static readonly Stopwatch Clock = Stopwatch.StartNew();
        static readonly List<MonoBehaviour> behaviours = new List<MonoBehaviour>();
        internal static readonly List<Networking.UnityWebRequest> requests = new List<Networking.UnityWebRequest>();
        static Thread main;
        public static int Frames;

        /// <summary>Runs work on this thread as Unity's main thread, frame after frame, until its task ends.</summary>
        public static void Run(Func<Task> work)
        {
            var context = new MainThreadContext();
            var before = SynchronizationContext.Current;
            main = Thread.CurrentThread;
            SynchronizationContext.SetSynchronizationContext(context);
            try
            {
                var task = work();
                while (!task.IsCompleted)
                {
                    Frame(context);
                    context.WaitForWork(1);
                }
                Frame(context); // what the work's end posted
                task.GetAwaiter().GetResult();
            }
            finally
            {
                SynchronizationContext.SetSynchronizationContext(before);
                main = null;
            }
        }

        public static bool OnMainThread { get { return main != null && Thread.CurrentThread == main; } }

        internal static void CheckMainThread(string what)
        {
            if (!OnMainThread) throw new InvalidOperationException(what + " can only be called from the main thread");
        }

        static void Frame(MainThreadContext context)
        {
            Frames++;
            context.RunPosted();
            foreach (var request in requests.ToArray()) request.Frame();
            context.RunPosted();
            foreach (var behaviour in behaviours.ToArray())
            {
                if (!behaviour.started)
                {
                    behaviour.started = true;
                    Call(behaviour, "Start");
                }
                Call(behaviour, "Update");
            }
            context.RunPosted();
        }

        internal static void Add(MonoBehaviour behaviour) { behaviours.Add(behaviour); }

        internal static void Remove(MonoBehaviour behaviour)
        {
            behaviours.Remove(behaviour);
            Call(behaviour, "OnDestroy");
        }

        internal static void Call(MonoBehaviour behaviour, string method)
        {
            var m = behaviour.GetType().GetMethod(method, BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic,
                                                  null, Type.EmptyTypes, null);
            if (m != null) m.Invoke(behaviour, null);
        }

        sealed class MainThreadContext : SynchronizationContext
        {
            readonly Queue<KeyValuePair<SendOrPostCallback, object>> Queue =
                new Queue<KeyValuePair<SendOrPostCallback, object>>();
            readonly object gate = new object();

            public override void Post(SendOrPostCallback d, object state)
            {
                lock (gate)
                {
                    Queue.Enqueue(new KeyValuePair<SendOrPostCallback, object>(d, state));
                    Monitor.PulseAll(gate);
                }
            }

            public override void Send(SendOrPostCallback d, object state)
            {
                throw new NotSupportedException("Send on the main thread's context");
            }

            internal void WaitForWork(int milliseconds)
            {
                lock (gate)
                {
                    if (Queue.Count == 0) Monitor.Wait(gate, milliseconds);
                }
            }

            // What was posted before this call (what that posts waits for the next call), as Unity's does.
            internal void RunPosted()
            {
                int count;
                lock (gate) count = Queue.Count;
                for (int i = 0; i < count; i++)
                {
                    KeyValuePair<SendOrPostCallback, object> item;
                    lock (gate) item = Queue.Dequeue();
                    item.Key(item.Value);
                }
            }
        }
    }
}

namespace UnityEngine.Networking
{
    public class DownloadHandler : IDisposable
    {
        internal readonly List<byte> Bytes = new List<byte>();

        public string text { get { return System.Text.Encoding.UTF8.GetString(Bytes.ToArray()); } }

        internal virtual void Deliver(byte[] data, int length) { Bytes.AddRange(data.Take(length)); }

        public virtual void Dispose() { }
    }

    public sealed class DownloadHandlerBuffer : DownloadHandler { }

    public abstract class DownloadHandlerScript : DownloadHandler
    {
        readonly byte[] buffer;

        protected DownloadHandlerScript() { buffer = new byte[4096]; }
        protected DownloadHandlerScript(byte[] preallocatedBuffer) { buffer = preallocatedBuffer; }

        protected virtual bool ReceiveData(byte[] data, int dataLength) { return true; }

        // Unity hands ReceiveData its preallocated buffer again and again: a script must copy what it keeps.
        internal override void Deliver(byte[] data, int length)
        {
            Array.Clear(buffer, 0, buffer.Length);
            Buffer.BlockCopy(data, 0, buffer, 0, length);
            ReceiveData(buffer, length);
        }
    }

    public class UploadHandler : IDisposable
    {
        internal byte[] Data;
        public virtual void Dispose() { }
    }

    public sealed class UploadHandlerRaw : UploadHandler
    {
        public UploadHandlerRaw(byte[] data) { Data = data; }
    }

    public class AsyncOperation
    {
        public bool isDone { get { return request.isDone; } }
        internal UnityWebRequest request;
    }

    public sealed class UnityWebRequestAsyncOperation : AsyncOperation { }

    public sealed class UnityWebRequest : IDisposable
    {
        public enum Result { InProgress, Success, ConnectionError, ProtocolError, DataProcessingError }

        /// <summary>(Stand-in only.) The most bytes one ReceiveData call gets.</summary>
        public static int ChunkBytes = 7;
        /// <summary>(Stand-in only.) Requests made so far, and the greatest number open at once.</summary>
        public static int Made;
        static readonly HttpClient http = new HttpClient { Timeout = System.Threading.Timeout.InfiniteTimeSpan };

        readonly string url, method;
        readonly List<KeyValuePair<string, string>> headers = new List<KeyValuePair<string, string>>();
        readonly ConcurrentQueue<byte[]> arrived = new ConcurrentQueue<byte[]>();
        readonly CancellationTokenSource abort = new CancellationTokenSource();
        volatile int status; // from the worker: the answer's status, once its headers are in
        volatile string failed; // from the worker: the error, once it has failed
        volatile bool finished; // from the worker: the whole body (or the failure) is in
        bool aborted, disposed, sent;
        long responseCodeSeen;
        ulong received;
        Result outcome = Result.InProgress;
        string errorSeen;

        public DownloadHandler downloadHandler;
        public UploadHandler uploadHandler;
        public int timeout;

        public UnityWebRequest(string url, string method)
        {
            Player.CheckMainThread("UnityWebRequest");
            this.url = url;
            this.method = method;
        }

        public bool isDone { get { Player.CheckMainThread("isDone"); return outcome != Result.InProgress; } }
        public Result result { get { Player.CheckMainThread("result"); return outcome; } }
        public string error { get { Player.CheckMainThread("error"); return errorSeen; } }
        public long responseCode { get { Player.CheckMainThread("responseCode"); return responseCodeSeen; } }

        // The answer's headers (as Unity's: names case-insensitive; null until the status is known)
        readonly System.Collections.Concurrent.ConcurrentDictionary<string, string> answerHeaders =
            new System.Collections.Concurrent.ConcurrentDictionary<string, string>();

        public string GetResponseHeader(string name)
        {
            Player.CheckMainThread("GetResponseHeader");
            string value;
            return responseCodeSeen != 0 && answerHeaders.TryGetValue(name.ToLowerInvariant(), out value) ? value : null;
        }
        public ulong downloadedBytes { get { Player.CheckMainThread("downloadedBytes"); return received; } }

        public void SetRequestHeader(string name, string value)
        {
            Player.CheckMainThread("SetRequestHeader");
            if (sent) throw new InvalidOperationException("the request was sent");
            headers.Add(new KeyValuePair<string, string>(name, value));
        }

        public UnityWebRequestAsyncOperation SendWebRequest()
        {
            Player.CheckMainThread("SendWebRequest");
            if (sent) throw new InvalidOperationException("the request was sent already");
            sent = true;
            Made++;
            Player.requests.Add(this);
            var body = uploadHandler != null ? uploadHandler.Data : null;
            int seconds = timeout;
            Task.Run(() => Exchange(body, seconds)); // the engine's side: not the script's thread
            return new UnityWebRequestAsyncOperation { request = this };
        }

        public void Abort()
        {
            Player.CheckMainThread("Abort");
            if (outcome != Result.InProgress || aborted) return;
            aborted = true;
            abort.Cancel();
        }

        public void Dispose()
        {
            Player.CheckMainThread("Dispose");
            if (disposed) return;
            disposed = true;
            if (outcome == Result.InProgress && sent)
            {
                aborted = true;
                abort.Cancel();
            }
            Player.requests.Remove(this);
            if (downloadHandler != null) downloadHandler.Dispose();
        }

        async Task Exchange(byte[] body, int seconds)
        {
            var limit = seconds > 0 ? new CancellationTokenSource(TimeSpan.FromSeconds(seconds)) : new CancellationTokenSource();
            using (var both = CancellationTokenSource.CreateLinkedTokenSource(limit.Token, abort.Token))
            {
                try
                {
                    var message = new HttpRequestMessage(new HttpMethod(method), url);
                    message.Headers.ConnectionClose = true;
                    string contentType = null;
                    foreach (var header in headers)
                    {
                        if (header.Key.Equals("Content-Type", StringComparison.OrdinalIgnoreCase)) contentType = header.Value;
                        else message.Headers.TryAddWithoutValidation(header.Key, header.Value);
                    }
                    if (body != null)
                    {
                        message.Content = new ByteArrayContent(body);
                        if (contentType != null) message.Content.Headers.TryAddWithoutValidation("Content-Type", contentType);
                    }
                    using (var response = await http.SendAsync(message, HttpCompletionOption.ResponseHeadersRead, both.Token))
                    {
                        foreach (var header in response.Headers.Concat(response.Content.Headers))
                            answerHeaders[header.Key.ToLowerInvariant()] = header.Value.FirstOrDefault();
                        status = (int)response.StatusCode;
                        var stream = await response.Content.ReadAsStreamAsync();
                        var buffer = new byte[4096];
                        while (true)
                        {
                            var read = stream.ReadAsync(buffer, 0, buffer.Length, both.Token);
                            // (Mono's stream read may not see the token: an abort disposes the response)
                            using (both.Token.Register(() => response.Dispose()))
                            {
                                int n = await read;
                                if (n == 0) break;
                                arrived.Enqueue(buffer.Take(n).ToArray());
                            }
                        }
                    }
                }
                catch (Exception e)
                {
                    if (abort.IsCancellationRequested) failed = "Request aborted";
                    else if (limit.IsCancellationRequested) failed = "Request timeout";
                    else if (Refused(e)) failed = "Cannot connect to destination host";
                    else failed = "Curl error 56: Receiving data failed (" + e.GetType().Name + ": " + e.Message + ")";
                }
                finally
                {
                    finished = true;
                    limit.Dispose();
                }
            }
        }

        static bool Refused(Exception e)
        {
            for (var c = e; c != null; c = c.InnerException)
            {
                var socket = c as SocketException;
                if (socket != null && socket.SocketErrorCode == SocketError.ConnectionRefused) return true;
            }
            return false;
        }

        // One frame of the engine's work, on the main thread: the status, the body's pieces, the end.
        internal void Frame()
        {
            if (outcome != Result.InProgress) return;
            if (aborted && !finished) return; // the abort's end comes once the worker has stopped
            if (status != 0) responseCodeSeen = status;
            byte[] chunk;
            while (!aborted && arrived.TryDequeue(out chunk))
            {
                received += (ulong)chunk.Length;
                for (int at = 0; at < chunk.Length; at += ChunkBytes)
                {
                    int n = Math.Min(ChunkBytes, chunk.Length - at);
                    var piece = new byte[n];
                    Buffer.BlockCopy(chunk, at, piece, 0, n);
                    if (downloadHandler != null) downloadHandler.Deliver(piece, n);
                }
            }
            if (!finished || !arrived.IsEmpty && !aborted) return;
            if (aborted) { errorSeen = "Request aborted"; outcome = Result.ConnectionError; }
            else if (failed != null) { errorSeen = failed; outcome = Result.ConnectionError; }
            else if (responseCodeSeen >= 400) { errorSeen = "HTTP/1.1 " + responseCodeSeen; outcome = Result.ProtocolError; }
            else outcome = Result.Success;
            Player.requests.Remove(this);
        }
    }
}
